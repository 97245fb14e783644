// Which CUDA device an ORT GPU hardware device is. ORT's OrtHardwareDevice
// carries the PCI *device* id (a hardware type: every H200 has the same one),
// not a CUDA ordinal; the device is found by its PCI bus id, which ORT's
// discovery gives as metadata "pci_bus_id" or, on Linux, through "card_idx"
// (/sys/class/drm/card<N>/device links to the PCI device).
#include "cuda_device.h"

#include <fmt/format.h>

#include <filesystem>

#include "ort_util.h"

#if defined(KILN_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace kiln::ort_ep {

namespace fs = std::filesystem;

bool cuda_built() {
#if defined(KILN_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

std::string pci_bus_id(const OrtHardwareDevice* d) {
  const OrtKeyValuePairs* md = ORT_API(HardwareDevice_Metadata)(d);
  if (!md) return "";
  if (const char* bus = ORT_API(GetKeyValue)(md, "pci_bus_id"); bus && *bus) return bus;
  const char* card = ORT_API(GetKeyValue)(md, "card_idx");
  if (!card || !*card) return "";
  std::error_code ec;
  fs::path dev = fs::read_symlink(fs::path("/sys/class/drm") / (std::string("card") + card) / "device", ec);
  if (ec) return "";
  return dev.filename().string();  // "0000:65:00.0"
}

CudaMatch cuda_ordinal(const OrtHardwareDevice* d) {
  CudaMatch m;
  m.bus_id = pci_bus_id(d);
#if defined(KILN_WITH_CUDA)
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    m.why = "the CUDA runtime finds no usable device (driver missing or too old)";
    return m;
  }
  if (!m.bus_id.empty()) {
    int ord = -1;
    if (cudaDeviceGetByPCIBusId(&ord, m.bus_id.c_str()) == cudaSuccess) {
      m.ordinal = ord;
      return m;
    }
    m.why = fmt::format("no CUDA device has PCI bus id {}", m.bus_id);
    return m;
  }
  if (count == 1) {
    m.ordinal = 0;  // one GPU: no choice to make
    return m;
  }
  m.why = fmt::format("ONNX Runtime gives no PCI bus id for the device, and this machine has {} CUDA devices", count);
#else
  m.why = "this kiln was built without CUDA support";
#endif
  return m;
}

}  // namespace kiln::ort_ep

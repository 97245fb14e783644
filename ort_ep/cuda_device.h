// Matching ORT's GPU hardware devices to CUDA devices (by PCI bus id).
#pragma once
#include <string>

#include "ort_abi.h"

namespace kiln::ort_ep {

/// Whether this kiln has the cuda target (else the EP offers no GPU device).
bool cuda_built();

/// PCI bus id ("0000:65:00.0") of an ORT hardware device, "" when ORT's
/// metadata does not lead to one.
std::string pci_bus_id(const OrtHardwareDevice* d);

/// The CUDA device behind an ORT GPU device: `ordinal` -1 with `why` when
/// it cannot be told (then the `device_id` option must say).
struct CudaMatch {
  int ordinal = -1;
  std::string bus_id;
  std::string why;
};
CudaMatch cuda_ordinal(const OrtHardwareDevice* d);

}  // namespace kiln::ort_ep

// kiln._kiln: the Python bindings (nanobind) over the public C++ API
// (include/kiln). The public Python API is python/kiln/__init__.py, which
// validates and converts arguments and calls into this module; every kiln
// error crosses as the class of its category (python/kiln/_errors.py).
//
// The GIL is released while a model compiles, loads or runs; Session.run is
// safe from several threads, as kiln::Session::run is.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "device.h"
#include "kiln/compile.h"
#include "kiln/session.h"
#include "runtime/inspect.h"
#include "runtime/inspect_model.h"
#include "support/version.h"

namespace nb = nanobind;

namespace kiln::py {

namespace {

/// `j` as JSON text for the Python layer (json.loads); bytes that are not
/// UTF-8 (names come from models) become U+FFFD instead of dump() throwing.
std::string json_text(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// ---------------------------------------------------------------- errors

/// kiln._errors classes by ErrorCode (1..8), set at import; never freed.
PyObject* g_errors[9] = {};

void translate_error(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    const int c = static_cast<int>(e.code());
    PyObject* cls = (c >= 1 && c <= 8 && g_errors[c]) ? g_errors[c] : g_errors[1];
    PyErr_SetString(cls ? cls : PyExc_RuntimeError, e.what());
  }
}

[[noreturn]] void invalid_option(const std::string& msg) { throw Error(ErrorCode::invalid_option, msg); }

// ---------------------------------------------------------------- options

/// Holds a Python callable; drops the reference with the GIL held, from
/// whichever thread the last copy of the callback dies on.
struct PyCallback {
  PyObject* fn;
  explicit PyCallback(nb::handle h) : fn(h.inc_ref().ptr()) {}
  ~PyCallback() {
    if (!Py_IsInitialized()) return;  // interpreter gone: leak rather than crash
    nb::gil_scoped_acquire gil;
    Py_DECREF(fn);
  }
};

/// SessionOptions from the keyword dict kiln/__init__.py builds. Values of
/// None keep the C++ defaults. Throws Error(invalid_option) naming the key.
SessionOptions make_options(const nb::dict& d) {
  SessionOptions o;
  for (auto [k, v] : d) {
    const std::string key = nb::cast<std::string>(k);
    if (v.is_none()) continue;
    try {
      if (key == "target") o.target = Target::parse(nb::cast<std::string>(v));
      else if (key == "precision") o.precision = parse_precision(nb::cast<std::string>(v));
      else if (key == "allow_tf32") o.allow_tf32 = nb::cast<bool>(v);
      else if (key == "precision_check") o.precision_check = parse_precision_check(nb::cast<std::string>(v));
      else if (key == "tuning") o.tuning = parse_tuning(nb::cast<std::string>(v));
      else if (key == "fallback") o.fallback = parse_fallback(nb::cast<std::string>(v));
      else if (key == "arch") o.arch = nb::cast<std::string>(v);
      else if (key == "cache_dir") o.cache_dir = std::filesystem::path(nb::cast<std::string>(v));
      else if (key == "use_cache") o.use_cache = nb::cast<bool>(v);
      else if (key == "shapes") o.input_shapes = nb::cast<std::map<std::string, std::vector<int64_t>>>(v);
      else if (key == "dims") {
        for (auto& [name, text] : nb::cast<std::map<std::string, std::string>>(v))
          o.dims[name] = DimSpec::parse(text, "dims '" + name + "'");
      } else if (key == "out_of_bucket") {
        auto s = nb::cast<std::string>(v);
        if (s == "compile") o.out_of_bucket = OutOfBucket::compile;
        else if (s == "error") o.out_of_bucket = OutOfBucket::error;
        else invalid_option("out_of_bucket must be 'compile' or 'error', not '" + s + "'");
      } else if (key == "cache_mismatch") {
        auto s = nb::cast<std::string>(v);
        if (s == "recompile") o.cache_mismatch = MismatchPolicy::recompile;
        else if (s == "error") o.cache_mismatch = MismatchPolicy::error;
        else invalid_option("cache_mismatch must be 'recompile' or 'error', not '" + s + "'");
      } else if (key == "trust_cache_dir") o.trust_cache_dir = nb::cast<bool>(v);
      else if (key == "cache_max_bytes") o.cache_max_bytes = nb::cast<uint64_t>(v);
      else if (key == "cache_lock_timeout_s") o.cache_lock_timeout_s = nb::cast<double>(v);
      else if (key == "threads") o.threads = nb::cast<int>(v);
      else if (key == "on_note") {
        auto cb = std::make_shared<PyCallback>(v);
        o.on_note = [cb](const std::string& note) {
          nb::gil_scoped_acquire gil;
          try {
            nb::handle(cb->fn)(note);
          } catch (nb::python_error& e) {
            e.discard_as_unraisable("kiln: the on_note callback");
          }
        };
      } else {
        invalid_option("unknown option '" + key + "'");
      }
    } catch (const nb::cast_error&) {
      invalid_option(fmt::format("option '{}': {} is not of the expected type", key,
                                 nb::cast<std::string>(nb::repr(v))));
    }
  }
  return o;
}

// ---------------------------------------------------------------- tensors

/// numpy __array_interface__ typestr of a kiln dtype. Types numpy lacks
/// (bfloat16, 8-bit floats, 4-bit ints) come back as same-sized unsigned /
/// signed integers; the Python layer views them as ml_dtypes types.
const char* typestr(DType t) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::f16: return "<f2";
    case DType::i8: return "|i1";
    case DType::i16: return "<i2";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::u8: return "|u1";
    case DType::u16: return "<u2";
    case DType::u32: return "<u4";
    case DType::u64: return "<u8";
    case DType::boolean: return "|b1";
    case DType::bf16: return "<u2";
    case DType::i4: return "|i1";
    case DType::u4: case DType::f8e4m3fn: case DType::f8e4m3fnuz: case DType::f8e5m2: case DType::f8e5m2fnuz:
      return "|u1";
    default:
      throw Error(ErrorCode::unsupported, fmt::format("a {} tensor has no numpy form", dtype_name(t)));
  }
}

/// A run output in host memory: numpy views it through __array_interface__
/// (no copy), the array's base keeping this object and so the buffer alive.
struct HostTensor {
  Tensor t;
};

nb::tuple shape_tuple(const std::vector<int64_t>& s) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(s.size()));
  if (!t) throw nb::python_error();
  for (size_t i = 0; i < s.size(); ++i) PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(s[i]));
  return nb::steal<nb::tuple>(t);
}

/// (name, dtype name, dims (-1: symbolic), symbols) per input or output.
using InfoTuple = std::tuple<std::string, std::string, std::vector<int64_t>, std::vector<std::string>>;
std::vector<InfoTuple> info_tuples(const std::vector<TensorInfo>& infos) {
  std::vector<InfoTuple> out;
  for (auto& i : infos) out.emplace_back(i.name, std::string(dtype_name(i.dtype)), i.dims, i.symbols);
  return out;
}

// ---------------------------------------------------------------- session

/// One device request's tensors, imported from DLPack and checked, with the
/// outputs kiln allocated (what Session.run on device tensors runs once, and
/// a Binding runs many times). Destroy it with the GIL held: the imported
/// tensors' deleters may touch Python objects.
struct DeviceRequest {
  std::vector<ImportedTensor> held;
  std::map<std::string, DeviceTensor> in, out;
  std::map<std::string, DeviceArray> made;  ///< outputs kiln allocated, by name

  DeviceRequest() = default;
  DeviceRequest(DeviceRequest&&) = default;
  DeviceRequest& operator=(DeviceRequest&&) = default;
  DeviceRequest(const DeviceRequest&) = delete;  // the imported tensors are owned once
  DeviceRequest& operator=(const DeviceRequest&) = delete;
};

struct PySession {
  Session s;
  Target target;

  /// inputs: (name, dtype name, shape, address) of C-contiguous host arrays
  /// the caller keeps alive for the call. Returns every output, in model order.
  nb::dict run_host(const std::vector<std::tuple<std::string, std::string, std::vector<int64_t>, uintptr_t>>& inputs) const {
    std::map<std::string, Tensor> in;
    for (auto& [name, dt, shape, addr] : inputs) {
      auto t = dtype_from_name(dt);
      if (!t || dtype_size(*t) == 0)
        throw Error(ErrorCode::invalid_input, fmt::format("input '{}' has dtype {}, which kiln does not take", name, dt));
      in[name] = Tensor::view(*t, shape, reinterpret_cast<void*>(addr), nullptr);
    }
    std::map<std::string, Tensor> out;
    {
      nb::gil_scoped_release release;
      out = s.run(in);
    }
    nb::dict res;
    for (auto& info : s.outputs()) {
      auto it = out.find(info.name);
      if (it != out.end()) res[info.name.c_str()] = nb::cast(HostTensor{it->second});
    }
    return res;
  }

  /// inputs / outputs: (name, DLPack capsule) of CUDA tensors on the session's
  /// device; outputs not given are allocated. Waits for `stream` (the
  /// caller's, which the producers ordered their writes on) before running.
  /// Imports and checks the DLPack capsules of one device request (inputs and
  /// caller-given outputs, by name) and allocates the outputs not given.
  /// Throws Error(invalid_input) naming the tensor for any mismatch.
  DeviceRequest prepare_device(const std::vector<std::pair<std::string, nb::object>>& inputs,
                               const std::vector<std::pair<std::string, nb::object>>& outputs) const {
    if (target.kind != Target::Kind::cuda)
      throw Error(ErrorCode::invalid_input,
                  fmt::format("device tensors were passed to a session on target {}; pass host (numpy) arrays, or "
                              "compile for target 'cuda'",
                              target.name()));
    const auto in_info = s.inputs(), out_info = s.outputs();
    auto find = [](const std::vector<TensorInfo>& list, const std::string& name, const char* what) {
      for (auto& i : list)
        if (i.name == name) return &i;
      std::string names;
      for (auto& i : list) names += (names.empty() ? "" : ", ") + i.name;
      throw Error(ErrorCode::invalid_input, fmt::format("unknown {} '{}' (the model's {}s are: {})", what, name, what, names));
    };
    DeviceRequest r;
    r.held.reserve(inputs.size() + outputs.size());
    for (auto& [name, cap] : inputs) {
      const TensorInfo* info = find(in_info, name, "input");
      const std::string what = "input '" + name + "'";
      r.held.emplace_back(cap.ptr(), what);
      r.in[name] = r.held.back().check(*info, target.device, what);
    }
    for (auto& i : in_info)
      if (!r.in.count(i.name))
        throw Error(ErrorCode::invalid_input, fmt::format("missing input '{}' ({}{})", i.name, dtype_name(i.dtype),
                                                          shape_text(i.dims)));
    for (auto& [name, cap] : outputs) {
      const TensorInfo* info = find(out_info, name, "output");
      const std::string what = "output '" + name + "'";
      r.held.emplace_back(cap.ptr(), what);
      if (r.held.back().read_only()) throw Error(ErrorCode::invalid_input, what + " is read-only");
      r.out[name] = r.held.back().check(*info, target.device, what);
    }
    for (auto& o : out_info) {
      if (r.out.count(o.name)) continue;
      if (std::any_of(o.dims.begin(), o.dims.end(), [](int64_t d) { return d < 0; }))
        throw Error(ErrorCode::invalid_option,
                    fmt::format("output '{}' has symbolic dims {}; device runs need a program for static shapes",
                                o.name, shape_text(o.dims)));
      DeviceArray a;
      a.dtype = o.dtype;
      a.shape = o.dims;
      a.buffer = std::make_shared<DeviceBuffer>(target.device, a.nbytes());
      r.out[o.name] = DeviceTensor{a.buffer->ptr, a.nbytes()};
      r.made.emplace(o.name, std::move(a));
    }
    return r;
  }

  /// Runs `r` after the work queued so far on `stream` (the caller's), GIL
  /// released; synchronous: the outputs are complete on return.
  void run_request(const DeviceRequest& r, uint64_t stream) const {
    nb::gil_scoped_release release;
    cuda::sync_stream(target.device, stream);
    s.run_device(r.in, r.out);
  }

  /// Every output by name, in model order: the DeviceArray kiln allocated, or
  /// None where the caller gave the tensor.
  nb::dict device_outputs(const DeviceRequest& r) const {
    nb::dict res;
    for (auto& o : s.outputs()) {
      auto it = r.made.find(o.name);
      res[o.name.c_str()] = it == r.made.end() ? nb::none() : nb::cast(it->second);
    }
    return res;
  }

  nb::dict run_device(const std::vector<std::pair<std::string, nb::object>>& inputs,
                      const std::vector<std::pair<std::string, nb::object>>& outputs, uint64_t stream) const {
    DeviceRequest r = prepare_device(inputs, outputs);  // its capsules' deleters run on return, GIL held
    run_request(r, stream);
    return device_outputs(r);
  }

  nb::dict stats() const {
    const SessionStats& st = s.stats();
    nb::dict d;
    d["cache"] = st.cache == SessionStats::Cache::hit ? "hit" : st.cache == SessionStats::Cache::miss ? "miss" : "none";
    d["compile_ms"] = st.compile_ms;
    d["load_ms"] = st.load_ms;
    d["artifact_path"] = st.artifact_path;
    d["notes"] = st.notes;
    return d;
  }

  nb::dict buckets() const {
    BucketStats b = s.buckets();
    nb::dict d;
    d["dims"] = b.dims;
    d["programs"] = b.programs;
    d["compiled_by_run"] = b.compiled_by_run;
    d["compile_ms"] = b.compile_ms;
    d["modes"] = b.modes;
    d["split_runs"] = b.split_runs;
    return d;
  }
};

/// Session.bind: a device request imported once and run many times (the
/// Python Session object is held, so the session outlives the binding).
struct PyBinding {
  nb::object owner;  ///< the Python Session
  const PySession* session;
  DeviceRequest request;
  uint64_t stream;
  void run() const { session->run_request(request, stream); }
};

nb::dict compile_model(const std::string& model, const std::string& out, const nb::dict& opts) {
  SessionOptions o = make_options(opts);
  CompileResult r;
  {
    nb::gil_scoped_release release;
    r = kiln::compile(model, out, o);
  }
  nb::dict d;
  d["compile_ms"] = r.compile_ms;
  d["write_ms"] = r.write_ms;
  d["nodes_imported"] = r.nodes_imported;
  d["nodes_compiled"] = r.nodes_compiled;
  d["nodes_folded"] = r.nodes_folded;
  d["arena_bytes"] = r.arena_bytes;
  d["naive_bytes"] = r.naive_bytes;
  d["artifact_bytes"] = r.artifact_bytes;
  d["programs"] = r.programs;
  d["model_digest"] = r.model_digest;
  d["cache_key"] = r.cache_key;
  return d;
}

}  // namespace

}  // namespace kiln::py

NB_MODULE(_kiln, m) {
  using namespace kiln;
  using namespace kiln::py;
  m.doc() = "kiln's C++ bindings (private: use the kiln package)";

  // Error classes come from kiln._errors (pure Python, importable first).
  nb::module_ errors = nb::module_::import_("kiln._errors");
  nb::dict by_code = nb::cast<nb::dict>(errors.attr("BY_CODE"));
  for (int c = 1; c <= 8; ++c) {
    nb::object cls = by_code[nb::int_(c)];
    g_errors[c] = cls.release().ptr();  // kept for the process's life
  }
  nb::register_exception_translator(translate_error);

  nb::class_<HostTensor>(m, "HostTensor", "A run output in host memory (numpy views it without a copy).")
      .def_prop_ro("dtype", [](const HostTensor& h) { return std::string(dtype_name(h.t.dtype())); })
      .def_prop_ro("shape", [](const HostTensor& h) { return shape_tuple(h.t.shape()); })
      .def_prop_ro("nbytes", [](const HostTensor& h) { return h.t.nbytes(); })
      .def_prop_ro("__array_interface__", [](const HostTensor& h) {
        nb::dict d;
        d["version"] = 3;
        d["shape"] = shape_tuple(h.t.shape());
        d["typestr"] = typestr(h.t.dtype());
        d["data"] = nb::make_tuple(reinterpret_cast<uintptr_t>(h.t.raw()), false);
        d["strides"] = nb::none();
        return d;
      });

  nb::class_<DeviceArray>(m, "DeviceArray")
      .def_prop_ro("dtype", [](const DeviceArray& a) { return std::string(dtype_name(a.dtype)); })
      .def_prop_ro("shape", [](const DeviceArray& a) { return shape_tuple(a.shape); })
      .def_prop_ro("device", [](const DeviceArray& a) { return a.buffer->device; })
      .def_prop_ro("nbytes", [](const DeviceArray& a) { return a.nbytes(); })
      .def_prop_ro("data_ptr", [](const DeviceArray& a) { return a.buffer->ptr; })
      .def(
          "capsule",
          [](const DeviceArray& a, bool versioned) {
            PyObject* cap = a.to_capsule(versioned);
            if (!cap) throw nb::python_error();
            return nb::steal(cap);
          },
          nb::arg("versioned"))
      .def("copy", [](const DeviceArray& a) {
        nb::gil_scoped_release release;
        return a.copy();
      })
      .def("to_host", [](const DeviceArray& a) {
        HostTensor h{Tensor(a.dtype, a.shape)};
        {
          nb::gil_scoped_release release;
          cuda::copy_to_host(a.buffer->device, h.t.raw(), a.buffer->ptr, a.nbytes());
        }
        return h;
      });

  nb::class_<PyBinding>(m, "Binding", "Device tensors bound to a Session once, run many times.")
      .def("run", &PyBinding::run)
      .def("outputs", [](const PyBinding& b) { return b.session->device_outputs(b.request); });

  nb::class_<PySession>(m, "Session")
      .def_static(
          "create",
          [](const std::string& model, const nb::dict& opts) {
            SessionOptions o = make_options(opts);
            nb::gil_scoped_release release;
            return new PySession{Session(model, o), o.target};
          },
          nb::arg("model"), nb::arg("options"), nb::rv_policy::take_ownership)
      .def_static(
          "load",
          [](const std::string& path, const nb::dict& opts) {
            SessionOptions o = make_options(opts);
            nb::gil_scoped_release release;
            return new PySession{Session::load(path, o), o.target};
          },
          nb::arg("path"), nb::arg("options"), nb::rv_policy::take_ownership)
      .def("run_host", &PySession::run_host, nb::arg("inputs"))
      .def("run_device", &PySession::run_device, nb::arg("inputs"), nb::arg("outputs"), nb::arg("stream"))
      .def(
          "bind",
          [](const PySession& p, const std::vector<std::pair<std::string, nb::object>>& inputs,
             const std::vector<std::pair<std::string, nb::object>>& outputs, uint64_t stream) {
            return new PyBinding{nb::borrow(nb::find(&p)), &p, p.prepare_device(inputs, outputs), stream};
          },
          nb::arg("inputs"), nb::arg("outputs"), nb::arg("stream"), nb::rv_policy::take_ownership)
      .def("inputs", [](const PySession& p) { return info_tuples(p.s.inputs()); })
      .def("outputs", [](const PySession& p) { return info_tuples(p.s.outputs()); })
      .def("stats", &PySession::stats)
      .def("buckets", &PySession::buckets)
      .def_prop_ro("target", [](const PySession& p) { return p.target.name(); })
      .def_prop_ro("device", [](const PySession& p) { return p.target.device; });

  m.def("compile", &compile_model, nb::arg("model"), nb::arg("out"), nb::arg("options"));
  m.def(
      "inspect",
      [](const std::string& path) {
        if (path.empty()) throw Error(ErrorCode::invalid_option, "inspect: the path is empty");
        nb::gil_scoped_release release;
        return json_text(inspect_file(path));
      },
      nb::arg("path"));
  m.def(
      "check",
      [](const std::string& path, const std::string& target) {
        if (path.empty()) throw Error(ErrorCode::invalid_option, "check: the path is empty");
        nb::gil_scoped_release release;
        return json_text(check_json(check_artifact(path, target)));
      },
      nb::arg("path"), nb::arg("target"));
  m.def("version", [] { return std::string(kiln::version()); });
  m.def("has_cuda", [] {
#ifdef KILN_WITH_CUDA
    return true;
#else
    return false;
#endif
  });
  m.def("default_cache_dir", [] { return default_cache_dir().string(); });
  m.def("dtype_size", [](const std::string& name) {
    auto t = dtype_from_name(name);
    return t ? dtype_size(*t) : size_t{0};
  });
  // Tests: raises the class of `code` with `message`, as any kiln error does.
  m.def("_raise", [](int code, const std::string& message) { throw Error(static_cast<ErrorCode>(code), message); });
}

// kiln's own declarations of the parts of ONNX Runtime's C ABI that the kiln
// plugin execution provider uses (ORT 1.24 and later: API version 24).
//
// ORT's C headers ship in no Debian package and in no PyPI wheel, so kiln
// declares what it calls here, written from ORT's public API reference
// (onnxruntime_c_api.h / onnxruntime_ep_c_api.h as documented on
// onnxruntime.ai). Only function-table slots kiln calls have names; the
// others are anonymous padding, and a static_assert pins every named slot to
// its index, so a miscount fails the build. The C API only appends: a slot's
// index never changes between versions, and each struct kiln fills carries
// `ort_version_supported` (kKilnOrtApiVersion) so that a newer ORT never
// calls a member this file does not declare.
//
// Whether the declarations are right is only shown by calling them: the test
// ort_ep/tests/test_abi_slots.py loads the plugin into onnxruntime from PyPI
// (the oldest supported version and the newest) and fails unless every slot
// named here (kOrtApiSlotsUsed and friends) was called there.
#pragma once
#include <cstddef>
#include <cstdint>

extern "C" {

/// The ORT API version kiln is written against: 1.24, the oldest ORT kiln
/// supports (1.22 plugins are not loadable by 1.23+; vendors support 1.24+).
inline constexpr uint32_t kKilnOrtApiVersion = 24;

// Opaque ORT objects: kiln only passes pointers to them back to ORT.
struct OrtStatus;
struct OrtValue;
struct OrtTypeInfo;
struct OrtTensorTypeAndShapeInfo;
struct OrtKernelContext;
struct OrtLogger;
struct OrtOpAttr;
struct OrtKeyValuePairs;
struct OrtHardwareDevice;
struct OrtEpDevice;
struct OrtSessionOptions;
struct OrtGraph;
struct OrtNode;
struct OrtValueInfo;
struct OrtEpGraphSupportInfo;
struct OrtNodeComputeContext;
struct OrtMemoryInfo;
struct OrtMemoryDevice;
struct OrtAllocator;
struct OrtRunOptions;
struct OrtSyncStreamImpl;
struct OrtDataTransferImpl;
struct OrtKernelRegistry;

/// OrtErrorCode: the category of an OrtStatus.
enum OrtErrorCode : int {
  ORT_OK = 0,
  ORT_FAIL = 1,
  ORT_INVALID_ARGUMENT = 2,
  ORT_NO_SUCHFILE = 3,
  ORT_NO_MODEL = 4,
  ORT_ENGINE_ERROR = 5,
  ORT_RUNTIME_EXCEPTION = 6,
  ORT_INVALID_PROTOBUF = 7,
  ORT_MODEL_LOADED = 8,
  ORT_NOT_IMPLEMENTED = 9,
  ORT_INVALID_GRAPH = 10,
  ORT_EP_FAIL = 11,
};

/// ONNXTensorElementDataType: same numbers as ONNX TensorProto.DataType
/// (and kiln::DType).
enum ONNXTensorElementDataType : int {
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED = 0,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING = 8,
};

/// ONNXType: what an OrtTypeInfo describes (kiln handles tensors only).
enum ONNXType : int { ONNX_TYPE_UNKNOWN = 0, ONNX_TYPE_TENSOR = 1 };

/// OrtOpAttrType: the kind of a node attribute.
enum OrtOpAttrType : int {
  ORT_OP_ATTR_UNDEFINED = 0,
  ORT_OP_ATTR_INT = 1,
  ORT_OP_ATTR_INTS = 2,
  ORT_OP_ATTR_FLOAT = 3,
  ORT_OP_ATTR_FLOATS = 4,
  ORT_OP_ATTR_STRING = 5,
  ORT_OP_ATTR_STRINGS = 6,
  ORT_OP_ATTR_GRAPH = 7,   ///< read with Node_GetSubgraphs, never ReadOpAttr
  ORT_OP_ATTR_TENSOR = 8,  ///< read with OpAttr_GetTensorAttributeAsOrtValue
};

/// OrtLoggingLevel: severity of a log message.
enum OrtLoggingLevel : int {
  ORT_LOGGING_LEVEL_VERBOSE = 0,
  ORT_LOGGING_LEVEL_INFO = 1,
  ORT_LOGGING_LEVEL_WARNING = 2,
  ORT_LOGGING_LEVEL_ERROR = 3,
  ORT_LOGGING_LEVEL_FATAL = 4,
};

/// OrtHardwareDeviceType: what kind of device ORT discovered.
enum OrtHardwareDeviceType : int {
  OrtHardwareDeviceType_CPU = 0,
  OrtHardwareDeviceType_GPU = 1,
  OrtHardwareDeviceType_NPU = 2,
};

/// OrtCompiledModelCompatibility: a factory's verdict on a compiled model's
/// compatibility string.
enum OrtCompiledModelCompatibility : int {
  OrtCompiledModelCompatibility_EP_NOT_APPLICABLE = 0,
  OrtCompiledModelCompatibility_EP_SUPPORTED_OPTIMAL = 1,
  OrtCompiledModelCompatibility_EP_SUPPORTED_PREFER_RECOMPILATION = 2,
  OrtCompiledModelCompatibility_EP_UNSUPPORTED = 3,
};

/// OrtEpDataLayout: the layout an EP prefers for convolution-like ops.
enum OrtEpDataLayout : int { OrtEpDataLayout_NCHW = 0, OrtEpDataLayout_NHWC = 1 };

struct OrtApi;
struct OrtEpApi;
struct OrtEpFactory;
struct OrtModelEditorApi;

/// OrtApiBase: the entry point ORT hands to CreateEpFactories.
struct OrtApiBase {
  /// The OrtApi table of `version`; null when that ORT is older than it.
  const OrtApi*(*GetApi)(uint32_t version);
  /// ORT's version string, e.g. "1.24.4".
  const char*(*GetVersionString)();
};

/// An unnamed OrtApi slot (a function kiln never calls).
using OrtUnusedSlot = void*;

/// OrtApi: ORT's main function table. Index of each named slot in the
/// comment; the static_asserts below pin them.
struct OrtApi {
  /// [0] New OrtStatus with `code` and a copy of `msg`; ORT frees it when
  /// it is returned to ORT.
  OrtStatus* (*CreateStatus)(OrtErrorCode code, const char* msg);
  /// [1] The category of a status.
  OrtErrorCode (*GetErrorCode)(const OrtStatus* status);
  /// [2] The message of a status (owned by the status).
  const char* (*GetErrorMessage)(const OrtStatus* status);
  OrtUnusedSlot unused_3_50[48];
  /// [51] Pointer to a tensor's data (also used on const values: ORT's
  /// initializers are not written through it).
  OrtStatus* (*GetTensorMutableData)(OrtValue* value, void** out);
  OrtUnusedSlot unused_52_54[3];
  /// [55] The tensor view of a type info; null when it is not a tensor.
  OrtStatus* (*CastTypeInfoToTensorInfo)(const OrtTypeInfo* type_info, const OrtTensorTypeAndShapeInfo** out);
  /// [56] ONNXType of a type info (tensor, sequence, map, ...).
  OrtStatus* (*GetOnnxTypeFromTypeInfo)(const OrtTypeInfo* type_info, ONNXType* out);
  OrtUnusedSlot unused_57_59[3];
  /// [60] Element type of a tensor type.
  OrtStatus* (*GetTensorElementType)(const OrtTensorTypeAndShapeInfo* info, ONNXTensorElementDataType* out);
  /// [61] Rank of a tensor type.
  OrtStatus* (*GetDimensionsCount)(const OrtTensorTypeAndShapeInfo* info, size_t* out);
  /// [62] Dims of a tensor type; -1 for a symbolic or unknown dim.
  OrtStatus* (*GetDimensions)(const OrtTensorTypeAndShapeInfo* info, int64_t* dim_values, size_t dim_values_length);
  /// [63] dim_param names per dim ("" where there is none).
  OrtStatus* (*GetSymbolicDimensions)(const OrtTensorTypeAndShapeInfo* info, const char** dim_params,
                                      size_t dim_params_length);
  /// [64] Number of elements of a tensor type (its dims' product).
  OrtStatus* (*GetTensorShapeElementCount)(const OrtTensorTypeAndShapeInfo* info, size_t* out);
  /// [65] New type-and-shape of a tensor value; free with ReleaseTensorTypeAndShapeInfo.
  OrtStatus* (*GetTensorTypeAndShape)(const OrtValue* value, OrtTensorTypeAndShapeInfo** out);
  OrtUnusedSlot unused_66_87[22];
  /// [88] Number of inputs of the fused node a Compute call runs.
  OrtStatus* (*KernelContext_GetInputCount)(const OrtKernelContext* context, size_t* out);
  /// [89] Number of outputs of that node.
  OrtStatus* (*KernelContext_GetOutputCount)(const OrtKernelContext* context, size_t* out);
  /// [90] Input `index` (owned by ORT).
  OrtStatus* (*KernelContext_GetInput)(const OrtKernelContext* context, size_t index, const OrtValue** out);
  /// [91] Output `index`, allocated by ORT with the given dims.
  OrtStatus* (*KernelContext_GetOutput)(OrtKernelContext* context, size_t index, const int64_t* dim_values,
                                        size_t dim_count, OrtValue** out);
  OrtUnusedSlot unused_92;
  /// [93] Frees a status ORT returned to kiln.
  void (*ReleaseStatus)(OrtStatus* status);
  OrtUnusedSlot unused_94_95[2];
  /// [96] Frees a value ORT created for kiln (tensor attributes).
  void (*ReleaseValue)(OrtValue* value);
  OrtUnusedSlot unused_97_98[2];
  /// [99] Frees a type-and-shape from GetTensorTypeAndShape.
  void (*ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo* info);
  OrtUnusedSlot unused_100_210[111];
  /// [211] New node attribute (for EPContext nodes): `data` points to an
  /// int64 (INT, len 1) or to `len` chars (STRING).
  OrtStatus* (*CreateOpAttr)(const char* name, const void* data, int len, OrtOpAttrType type, OrtOpAttr** op_attr);
  OrtUnusedSlot unused_212;
  OrtUnusedSlot unused_213_236[24];
  OrtUnusedSlot unused_237;
  OrtUnusedSlot unused_238;
  OrtUnusedSlot unused_239_246[8];
  /// [247] Writes a message to an ORT logger (session or default logger).
  OrtStatus* (*Logger_LogMessage)(const OrtLogger* logger, OrtLoggingLevel level, const char* message,
                                  const char* file_path, int line_number, const char* func_name);
  OrtUnusedSlot unused_248_271[24];
  /// [272] Copies an attribute's value into `data` (`len` bytes); `*out`
  /// gets the bytes needed (an error status when len is too small). INT:
  /// one int64, FLOAT: one float, INTS / FLOATS: the array, STRING: the
  /// characters, STRINGS: the strings one after another, each NUL-ended.
  OrtStatus* (*ReadOpAttr)(const OrtOpAttr* op_attr, OrtOpAttrType type, void* data, size_t len, size_t* out);
  OrtUnusedSlot unused_273_288[16];
  /// [289] Name of a value.
  OrtStatus* (*GetValueInfoName)(const OrtValueInfo* value_info, const char** name);
  /// [290] Type of a value (owned by the value info; may be null when unknown).
  OrtStatus* (*GetValueInfoTypeInfo)(const OrtValueInfo* value_info, const OrtTypeInfo** type_info);
  /// [291] The model editor function table (kiln builds EPContext nodes with it).
  const OrtModelEditorApi* (*GetModelEditorApi)();
  OrtUnusedSlot unused_292_296[5];
  /// [297] Value of `key` in key-value pairs; null when absent.
  const char* (*GetKeyValue)(const OrtKeyValuePairs* kvps, const char* key);
  /// [298] Every key and value (arrays owned by `kvps`).
  void (*GetKeyValuePairs)(const OrtKeyValuePairs* kvps, const char* const** keys, const char* const** values,
                           size_t* num_entries);
  OrtUnusedSlot unused_299;
  /// [300] Frees key-value pairs ORT created for kiln.
  void (*ReleaseKeyValuePairs)(OrtKeyValuePairs* kvps);
  OrtUnusedSlot unused_301_306[6];
  /// [307] CPU, GPU or NPU.
  OrtHardwareDeviceType (*HardwareDevice_Type)(const OrtHardwareDevice* device);
  /// [308] PCI vendor id (0x10de: NVIDIA); 0 for a CPU without one.
  uint32_t (*HardwareDevice_VendorId)(const OrtHardwareDevice* device);
  OrtUnusedSlot unused_309;
  OrtUnusedSlot unused_310;
  /// [311] Discovery metadata ("pci_bus_id" where ORT reads it, else "card_idx":
  /// /sys/class/drm/card<N>).
  const OrtKeyValuePairs* (*HardwareDevice_Metadata)(const OrtHardwareDevice* device);
  OrtUnusedSlot unused_312_316[5];
  /// [317] The EP function table (OrtEpApi).
  const OrtEpApi* (*GetEpApi)();
  OrtUnusedSlot unused_318_325[8];
  /// [326] The value of a constant initializer (owned by the graph).
  OrtStatus* (*ValueInfo_GetInitializerValue)(const OrtValueInfo* value_info, const OrtValue** initializer_value);
  OrtUnusedSlot unused_327_330[4];
  /// [331] Whether a value is a constant initializer (not overridable).
  OrtStatus* (*ValueInfo_IsConstantInitializer)(const OrtValueInfo* value_info, bool* is_constant_initializer);
  OrtUnusedSlot unused_332;
  OrtUnusedSlot unused_333;
  /// [334] Path of the model file the graph comes from ("" when built in memory).
  OrtStatus* (*Graph_GetModelPath)(const OrtGraph* graph, const char** model_path);
  /// [335] ONNX IR version of the model the graph belongs to.
  OrtStatus* (*Graph_GetOnnxIRVersion)(const OrtGraph* graph, int64_t* onnx_ir_version);
  /// [336] Number of opset imports.
  OrtStatus* (*Graph_GetNumOperatorSets)(const OrtGraph* graph, size_t* num_operator_sets);
  /// [337] Opset imports: domain ("" = ONNX) and version.
  OrtStatus* (*Graph_GetOperatorSets)(const OrtGraph* graph, const char** domains, int64_t* opset_versions,
                                      size_t num_operator_sets);
  /// [338] Number of graph inputs (without initializers).
  OrtStatus* (*Graph_GetNumInputs)(const OrtGraph* graph, size_t* num_inputs);
  /// [339] Graph inputs, in order.
  OrtStatus* (*Graph_GetInputs)(const OrtGraph* graph, const OrtValueInfo** inputs, size_t num_inputs);
  /// [340] Number of graph outputs.
  OrtStatus* (*Graph_GetNumOutputs)(const OrtGraph* graph, size_t* num_outputs);
  /// [341] Graph outputs, in order.
  OrtStatus* (*Graph_GetOutputs)(const OrtGraph* graph, const OrtValueInfo** outputs, size_t num_outputs);
  /// [342] Number of initializers the graph's nodes use.
  OrtStatus* (*Graph_GetNumInitializers)(const OrtGraph* graph, size_t* num_initializers);
  /// [343] Those initializers.
  OrtStatus* (*Graph_GetInitializers)(const OrtGraph* graph, const OrtValueInfo** initializers,
                                      size_t num_initializers);
  /// [344] Number of nodes.
  OrtStatus* (*Graph_GetNumNodes)(const OrtGraph* graph, size_t* num_nodes);
  /// [345] The nodes.
  OrtStatus* (*Graph_GetNodes)(const OrtGraph* graph, const OrtNode** nodes, size_t num_nodes);
  /// [346] The node holding this graph as a subgraph (null for the main graph).
  OrtStatus* (*Graph_GetParentNode)(const OrtGraph* graph, const OrtNode** node);
  OrtUnusedSlot unused_347_348[2];
  /// [349] Name of a node.
  OrtStatus* (*Node_GetName)(const OrtNode* node, const char** node_name);
  /// [350] op_type of a node.
  OrtStatus* (*Node_GetOperatorType)(const OrtNode* node, const char** operator_type);
  /// [351] Domain of a node ("" = ONNX).
  OrtStatus* (*Node_GetDomain)(const OrtNode* node, const char** domain_name);
  OrtUnusedSlot unused_352;
  /// [353] Number of inputs (optional ones absent included).
  OrtStatus* (*Node_GetNumInputs)(const OrtNode* node, size_t* num_inputs);
  /// [354] Inputs; a null entry is an omitted optional input.
  OrtStatus* (*Node_GetInputs)(const OrtNode* node, const OrtValueInfo** inputs, size_t num_inputs);
  /// [355] Number of outputs.
  OrtStatus* (*Node_GetNumOutputs)(const OrtNode* node, size_t* num_outputs);
  /// [356] Outputs; a null entry is an omitted optional output.
  OrtStatus* (*Node_GetOutputs)(const OrtNode* node, const OrtValueInfo** outputs, size_t num_outputs);
  /// [357] Number of outer-scope values the node's subgraphs read.
  OrtStatus* (*Node_GetNumImplicitInputs)(const OrtNode* node, size_t* num_implicit_inputs);
  /// [358] Those values.
  OrtStatus* (*Node_GetImplicitInputs)(const OrtNode* node, const OrtValueInfo** implicit_inputs,
                                       size_t num_implicit_inputs);
  /// [359] Number of attributes.
  OrtStatus* (*Node_GetNumAttributes)(const OrtNode* node, size_t* num_attributes);
  /// [360] The attributes.
  OrtStatus* (*Node_GetAttributes)(const OrtNode* node, const OrtOpAttr** attributes, size_t num_attributes);
  OrtUnusedSlot unused_361;
  /// [362] A TENSOR attribute as a new OrtValue (free with ReleaseValue).
  OrtStatus* (*OpAttr_GetTensorAttributeAsOrtValue)(const OrtOpAttr* attribute, OrtValue** attr_tensor);
  /// [363] Kind of an attribute.
  OrtStatus* (*OpAttr_GetType)(const OrtOpAttr* attribute, OrtOpAttrType* type);
  /// [364] Name of an attribute.
  OrtStatus* (*OpAttr_GetName)(const OrtOpAttr* attribute, const char** name);
  /// [365] Number of GRAPH attributes (If, Loop, Scan bodies).
  OrtStatus* (*Node_GetNumSubgraphs)(const OrtNode* node, size_t* num_subgraphs);
  /// [366] The subgraphs and the names of the attributes holding them.
  OrtStatus* (*Node_GetSubgraphs)(const OrtNode* node, const OrtGraph** subgraphs, size_t num_subgraphs,
                                  const char** attribute_names);
  OrtUnusedSlot unused_367_378[12];
  /// [379] Every session config entry as new key-value pairs (free with ReleaseKeyValuePairs).
  OrtStatus* (*GetSessionOptionsConfigEntries)(const OrtSessionOptions* options, OrtKeyValuePairs** out);
};

/// Every named OrtApi slot with its index (the static_asserts below and the
/// plugin's record of which slots were called both come from this list).
#define KILN_ORT_API_SLOTS(X) \
  X(OrtApi, CreateStatus, 0) \
  X(OrtApi, GetErrorCode, 1) \
  X(OrtApi, GetErrorMessage, 2) \
  X(OrtApi, GetTensorMutableData, 51) \
  X(OrtApi, CastTypeInfoToTensorInfo, 55) \
  X(OrtApi, GetOnnxTypeFromTypeInfo, 56) \
  X(OrtApi, GetTensorElementType, 60) \
  X(OrtApi, GetDimensionsCount, 61) \
  X(OrtApi, GetDimensions, 62) \
  X(OrtApi, GetSymbolicDimensions, 63) \
  X(OrtApi, GetTensorShapeElementCount, 64) \
  X(OrtApi, GetTensorTypeAndShape, 65) \
  X(OrtApi, KernelContext_GetInputCount, 88) \
  X(OrtApi, KernelContext_GetOutputCount, 89) \
  X(OrtApi, KernelContext_GetInput, 90) \
  X(OrtApi, KernelContext_GetOutput, 91) \
  X(OrtApi, ReleaseStatus, 93) \
  X(OrtApi, ReleaseValue, 96) \
  X(OrtApi, ReleaseTensorTypeAndShapeInfo, 99) \
  X(OrtApi, CreateOpAttr, 211) \
  X(OrtApi, Logger_LogMessage, 247) \
  X(OrtApi, ReadOpAttr, 272) \
  X(OrtApi, GetValueInfoName, 289) \
  X(OrtApi, GetValueInfoTypeInfo, 290) \
  X(OrtApi, GetModelEditorApi, 291) \
  X(OrtApi, GetKeyValue, 297) \
  X(OrtApi, GetKeyValuePairs, 298) \
  X(OrtApi, ReleaseKeyValuePairs, 300) \
  X(OrtApi, HardwareDevice_Type, 307) \
  X(OrtApi, HardwareDevice_VendorId, 308) \
  X(OrtApi, HardwareDevice_Metadata, 311) \
  X(OrtApi, GetEpApi, 317) \
  X(OrtApi, ValueInfo_GetInitializerValue, 326) \
  X(OrtApi, ValueInfo_IsConstantInitializer, 331) \
  X(OrtApi, Graph_GetModelPath, 334) \
  X(OrtApi, Graph_GetOnnxIRVersion, 335) \
  X(OrtApi, Graph_GetNumOperatorSets, 336) \
  X(OrtApi, Graph_GetOperatorSets, 337) \
  X(OrtApi, Graph_GetNumInputs, 338) \
  X(OrtApi, Graph_GetInputs, 339) \
  X(OrtApi, Graph_GetNumOutputs, 340) \
  X(OrtApi, Graph_GetOutputs, 341) \
  X(OrtApi, Graph_GetNumInitializers, 342) \
  X(OrtApi, Graph_GetInitializers, 343) \
  X(OrtApi, Graph_GetNumNodes, 344) \
  X(OrtApi, Graph_GetNodes, 345) \
  X(OrtApi, Graph_GetParentNode, 346) \
  X(OrtApi, Node_GetName, 349) \
  X(OrtApi, Node_GetOperatorType, 350) \
  X(OrtApi, Node_GetDomain, 351) \
  X(OrtApi, Node_GetNumInputs, 353) \
  X(OrtApi, Node_GetInputs, 354) \
  X(OrtApi, Node_GetNumOutputs, 355) \
  X(OrtApi, Node_GetOutputs, 356) \
  X(OrtApi, Node_GetNumImplicitInputs, 357) \
  X(OrtApi, Node_GetImplicitInputs, 358) \
  X(OrtApi, Node_GetNumAttributes, 359) \
  X(OrtApi, Node_GetAttributes, 360) \
  X(OrtApi, OpAttr_GetTensorAttributeAsOrtValue, 362) \
  X(OrtApi, OpAttr_GetType, 363) \
  X(OrtApi, OpAttr_GetName, 364) \
  X(OrtApi, Node_GetNumSubgraphs, 365) \
  X(OrtApi, Node_GetSubgraphs, 366) \
  X(OrtApi, GetSessionOptionsConfigEntries, 379) \

#define KILN_ORT_SLOT_ASSERT(type, field, index) \
  static_assert(offsetof(type, field) == (index) * sizeof(void*), #type "::" #field " is not slot " #index);
KILN_ORT_API_SLOTS(KILN_ORT_SLOT_ASSERT)

/// OrtNodeFusionOptions: how ORT fuses the nodes an EP claims.
struct OrtNodeFusionOptions {
  uint32_t ort_version_supported;   ///< kKilnOrtApiVersion
  /// true: ORT does not pass constant initializers to the fused node (kiln
  /// holds its own copy in the compiled program).
  bool drop_constant_initializers;
};

/// OrtEpApi: the function table for EP implementations (OrtApi::GetEpApi).
struct OrtEpApi {
  /// [0] New OrtEpDevice pairing this factory with a hardware device; ORT
  /// owns it once returned from GetSupportedDevices.
  OrtStatus* (*CreateEpDevice)(OrtEpFactory* ep_factory, const OrtHardwareDevice* hardware_device,
                               const OrtKeyValuePairs* ep_metadata, const OrtKeyValuePairs* ep_options,
                               OrtEpDevice** ep_device);
  OrtUnusedSlot unused_1;
  /// [2] Claims `nodes` to be fused into one node that the EP compiles.
  /// No unclaimed node may lie on a path between two of them.
  OrtStatus* (*EpGraphSupportInfo_AddNodesToFuse)(OrtEpGraphSupportInfo* graph_support_info,
                                                  const OrtNode* const* nodes, size_t num_nodes,
                                                  const OrtNodeFusionOptions* node_fusion_options);
  OrtUnusedSlot unused_3;
  /// [4] Name of the fused node a compute state is created for.
  const char* (*NodeComputeContext_NodeName)(const OrtNodeComputeContext* context);
};
/// Every named OrtEpApi slot with its index.
#define KILN_ORT_EP_API_SLOTS(X)                   \
  X(OrtEpApi, CreateEpDevice, 0)                   \
  X(OrtEpApi, EpGraphSupportInfo_AddNodesToFuse, 2) \
  X(OrtEpApi, NodeComputeContext_NodeName, 4)
KILN_ORT_EP_API_SLOTS(KILN_ORT_SLOT_ASSERT)

/// OrtModelEditorApi: builds graph pieces (kiln: EPContext nodes).
struct OrtModelEditorApi {
  OrtUnusedSlot unused_0_5[6];
  /// [6] New node; takes ownership of `attributes` (not of the names).
  OrtStatus* (*CreateNode)(const char* operator_name, const char* domain_name, const char* node_name,
                           const char* const* input_names, size_t input_names_len, const char* const* output_names,
                           size_t output_names_len, OrtOpAttr** attributes, size_t attribs_len, OrtNode** node);
};
/// Every named OrtModelEditorApi slot with its index.
#define KILN_ORT_EDITOR_API_SLOTS(X) X(OrtModelEditorApi, CreateNode, 6)
KILN_ORT_EDITOR_API_SLOTS(KILN_ORT_SLOT_ASSERT)

/// OrtNodeComputeInfo: how ORT runs a node kiln compiled. Filled by kiln.
struct OrtNodeComputeInfo {
  uint32_t ort_version_supported;  ///< kKilnOrtApiVersion
  /// Makes the per-node state Compute gets.
  OrtStatus* (*CreateState)(OrtNodeComputeInfo* this_ptr, OrtNodeComputeContext* compute_context,
                            void** compute_state);
  /// Runs the node: inputs and outputs through the kernel context.
  OrtStatus* (*Compute)(OrtNodeComputeInfo* this_ptr, void* compute_state, OrtKernelContext* kernel_context);
  /// Frees what CreateState made.
  void (*ReleaseState)(OrtNodeComputeInfo* this_ptr, void* compute_state);
};

/// OrtEp: one execution provider instance (per session). Filled by kiln;
/// null members are optional ones kiln does not implement.
struct OrtEp {
  uint32_t ort_version_supported;  ///< kKilnOrtApiVersion
  /// The EP's name (ORT copies it).
  const char* (*GetName)(const OrtEp* this_ptr);
  /// Claims the nodes of `graph` the EP takes (OrtEpApi::EpGraphSupportInfo_AddNodesToFuse).
  OrtStatus* (*GetCapability)(OrtEp* this_ptr, const OrtGraph* graph, OrtEpGraphSupportInfo* graph_support_info);
  /// Compiles `count` claimed graphs; fills one compute info each, and one
  /// EPContext node each when ORT writes an EPContext model.
  OrtStatus* (*Compile)(OrtEp* this_ptr, const OrtGraph** graphs, const OrtNode** fused_nodes, size_t count,
                        OrtNodeComputeInfo** node_compute_infos, OrtNode** ep_context_nodes);
  /// Frees compute infos from Compile.
  void (*ReleaseNodeComputeInfos)(OrtEp* this_ptr, OrtNodeComputeInfo** node_compute_infos,
                                  size_t num_node_compute_infos);
  /// Optional: preferred layout (null: NCHW).
  OrtStatus* (*GetPreferredDataLayout)(OrtEp* this_ptr, OrtEpDataLayout* preferred_data_layout);
  /// Optional: per-op layout conversion choice (null: ORT decides).
  OrtStatus* (*ShouldConvertDataLayoutForOp)(OrtEp* this_ptr, const char* domain, const char* op_type,
                                             OrtEpDataLayout target_data_layout, int* should_convert);
  /// Optional: options set after session creation.
  OrtStatus* (*SetDynamicOptions)(OrtEp* this_ptr, const char* const* option_keys, const char* const* option_values,
                                  size_t num_options);
  /// Optional: called before each run.
  OrtStatus* (*OnRunStart)(OrtEp* this_ptr, const OrtRunOptions* run_options);
  /// Optional: called after each run.
  OrtStatus* (*OnRunEnd)(OrtEp* this_ptr, const OrtRunOptions* run_options, bool sync_stream);
  /// Optional: per-session allocator (null: the factory's).
  OrtStatus* (*CreateAllocator)(OrtEp* this_ptr, const OrtMemoryInfo* memory_info, OrtAllocator** allocator);
  /// Optional: per-session stream (null: the factory's).
  OrtStatus* (*CreateSyncStreamForDevice)(OrtEp* this_ptr, const OrtMemoryDevice* memory_device,
                                          OrtSyncStreamImpl** stream);
  /// The compatibility string stored in a compiled (EPContext) model.
  const char* (*GetCompiledModelCompatibilityInfo)(OrtEp* this_ptr, const OrtGraph* graph);
  /// Optional (1.24): a kernel registry; kiln compiles instead (null).
  OrtStatus* (*GetKernelRegistry)(OrtEp* this_ptr, const OrtKernelRegistry** kernel_registry);
  /// Later optional members (IsConcurrentRunSupported since 1.24, then
  /// members of newer versions, which a version-24 struct never offers):
  /// kiln implements none, and null means "not implemented". Kept null
  /// here so that no ORT reads past the struct.
  void* optional_tail[8];
};

/// OrtEpFactory: makes EPs for the devices it supports. Filled by kiln.
struct OrtEpFactory {
  uint32_t ort_version_supported;  ///< kKilnOrtApiVersion
  /// EP name (e.g. "KilnExecutionProvider"); the session config prefix is
  /// "ep.<name lowercased>.".
  const char* (*GetName)(const OrtEpFactory* this_ptr);
  /// Vendor name.
  const char* (*GetVendor)(const OrtEpFactory* this_ptr);
  /// Picks the hardware devices the factory serves (OrtEpApi::CreateEpDevice each).
  OrtStatus* (*GetSupportedDevices)(OrtEpFactory* this_ptr, const OrtHardwareDevice* const* devices,
                                    size_t num_devices, OrtEpDevice** ep_devices, size_t max_ep_devices,
                                    size_t* num_ep_devices);
  /// Makes an EP for a session; `session_options` holds the EP options as
  /// config entries "ep.<name>.<key>" and is valid only during the call.
  OrtStatus* (*CreateEp)(OrtEpFactory* this_ptr, const OrtHardwareDevice* const* devices,
                         const OrtKeyValuePairs* const* ep_metadata_pairs, size_t num_devices,
                         const OrtSessionOptions* session_options, const OrtLogger* logger, OrtEp** ep);
  /// Frees an EP from CreateEp.
  void (*ReleaseEp)(OrtEpFactory* this_ptr, OrtEp* ep);
  /// PCI vendor id of the EP's vendor.
  uint32_t (*GetVendorId)(const OrtEpFactory* this_ptr);
  /// The EP's version (semantic versioning).
  const char* (*GetVersion)(const OrtEpFactory* this_ptr);
  /// Judges a compatibility string from GetCompiledModelCompatibilityInfo.
  OrtStatus* (*ValidateCompiledModelCompatibilityInfo)(OrtEpFactory* this_ptr, const OrtHardwareDevice* const* devices,
                                                       size_t num_devices, const char* compatibility_info,
                                                       OrtCompiledModelCompatibility* model_compatibility);
  /// Allocator for a memory info the factory registered (null out: ORT's CPU allocator).
  OrtStatus* (*CreateAllocator)(OrtEpFactory* this_ptr, const OrtMemoryInfo* memory_info,
                                const OrtKeyValuePairs* allocator_options, OrtAllocator** allocator);
  /// Frees an allocator from CreateAllocator.
  void (*ReleaseAllocator)(OrtEpFactory* this_ptr, OrtAllocator* allocator);
  /// Device copies (null out: none needed). Must not be a null member: ORT
  /// 1.31 crashed calling it unchecked.
  OrtStatus* (*CreateDataTransfer)(OrtEpFactory* this_ptr, OrtDataTransferImpl** data_transfer);
  /// Whether the EPs use streams.
  bool (*IsStreamAware)(const OrtEpFactory* this_ptr);
  /// A stream for a device (null out when not stream aware).
  OrtStatus* (*CreateSyncStreamForDevice)(OrtEpFactory* this_ptr, const OrtMemoryDevice* memory_device,
                                          const OrtKeyValuePairs* stream_options, OrtSyncStreamImpl** stream);
  /// Later optional members (1.24: device incompatibility details, external
  /// resource import, custom op domains, environment options; their order
  /// differs between ORT's development snapshots): kiln implements none, and
  /// null means "not implemented". Kept null so that no ORT reads past the struct.
  void* optional_tail[8];
};

}  // extern "C"

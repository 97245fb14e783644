# ONNX Runtime (CPU EP, 2 threads) on the same convolution shapes as conv.cpp: a one-node Conv + Relu model
# per shape, NCHW in and out (so its NCHWc reorders are included), median of 200 runs.
# Usage: .venv/bin/python bench/onednn_versions/ort_conv.py
import time, numpy as np, onnx, onnxruntime as ort
from onnx import helper, TensorProto, numpy_helper
shapes=[(64,64,56,3,1),(128,128,28,3,1),(256,256,14,3,1),(512,512,7,3,1),(128,128,56,3,2),(3,64,224,7,2),(256,64,56,1,1),(64,256,56,1,1),(1024,256,14,1,1)]
print("onnxruntime", ort.__version__)
for ic,oc,h,k,s in shapes:
    p=k//2; oh=(h+2*p-k)//s+1
    w=numpy_helper.from_array((np.random.rand(oc,ic,k,k).astype(np.float32)-0.5)*0.02,"w")
    b=numpy_helper.from_array(np.zeros(oc,np.float32),"b")
    g=helper.make_graph([helper.make_node("Conv",["x","w","b"],["c"],pads=[p]*4,strides=[s,s],kernel_shape=[k,k]),helper.make_node("Relu",["c"],["y"])],"g",
        [helper.make_tensor_value_info("x",TensorProto.FLOAT,[1,ic,h,h])],[helper.make_tensor_value_info("y",TensorProto.FLOAT,[1,oc,oh,oh])],[w,b])
    m=helper.make_model(g,opset_imports=[helper.make_opsetid("",17)]); m.ir_version=8
    so=ort.SessionOptions(); so.intra_op_num_threads=2
    sess=ort.InferenceSession(m.SerializeToString(),so,providers=["CPUExecutionProvider"])
    x=np.full((1,ic,h,h),0.5,np.float32)
    for _ in range(30): sess.run(None,{"x":x})
    t=[]
    for _ in range(200):
        a=time.perf_counter(); sess.run(None,{"x":x}); t.append((time.perf_counter()-a)*1e3)
    med=sorted(t)[100]; gf=2*ic*oc*k*k*oh*oh/1e9
    print(f"{ic:4d}->{oc:4d} {h:3d} k{k} s{s}: {med:.3f} ms {gf/(med/1e3):.1f} GFLOP/s  ORT (input/output NCHW: includes its NCHWc reorders)")

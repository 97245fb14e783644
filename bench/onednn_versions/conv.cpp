// One convolution per ResNet-50 shape through oneDNN, timed (bench/onednn_versions/run.sh builds it
// against oneDNN 2.x and 3.x from the same source: the two APIs differ in how a primitive descriptor is made).
#include <oneapi/dnnl/dnnl.hpp>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
using namespace dnnl;
using tag = memory::format_tag; using dt = memory::data_type;
struct S { int ic, oc, h, k, s; };
int main() {
  engine eng(engine::kind::cpu, 0); stream st(eng);
  std::vector<S> shapes = {{64,64,56,3,1},{128,128,28,3,1},{256,256,14,3,1},{512,512,7,3,1},{128,128,56,3,2},{3,64,224,7,2},{256,64,56,1,1},{64,256,56,1,1},{1024,256,14,1,1}};
  for (auto sh : shapes) {
    int pad = sh.k/2, oh = (sh.h + 2*pad - sh.k)/sh.s + 1;
    memory::desc src({1,sh.ic,sh.h,sh.h}, dt::f32, tag::any), wei({sh.oc,sh.ic,sh.k,sh.k}, dt::f32, tag::any),
      bia({sh.oc}, dt::f32, tag::x), dst({1,sh.oc,oh,oh}, dt::f32, tag::any);
    post_ops po; 
#if DNNL_VERSION_MAJOR >= 3
    po.append_eltwise(algorithm::eltwise_relu, 0.f, 0.f);
    primitive_attr attr; attr.set_post_ops(po);
    convolution_forward::primitive_desc pd(eng, prop_kind::forward_inference, algorithm::convolution_direct, src, wei, bia, dst, {sh.s,sh.s}, {pad,pad}, {pad,pad}, attr);
#else
    po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
    primitive_attr attr; attr.set_post_ops(po);
    convolution_forward::desc d(prop_kind::forward_inference, algorithm::convolution_direct, src, wei, bia, dst, {sh.s,sh.s}, {pad,pad}, {pad,pad});
    convolution_forward::primitive_desc pd(d, attr, eng);
#endif
    memory s(pd.src_desc(), eng), w(pd.weights_desc(), eng), b(bia, eng), o(pd.dst_desc(), eng);
    std::fill((float*)s.get_data_handle(), (float*)s.get_data_handle() + pd.src_desc().get_size()/4, 0.5f);
    std::fill((float*)w.get_data_handle(), (float*)w.get_data_handle() + pd.weights_desc().get_size()/4, 0.01f);
    convolution_forward c(pd);
    std::vector<double> t;
    for (int i = 0; i < 230; ++i) { auto a = std::chrono::steady_clock::now();
      c.execute(st, {{DNNL_ARG_SRC,s},{DNNL_ARG_WEIGHTS,w},{DNNL_ARG_BIAS,b},{DNNL_ARG_DST,o}}); st.wait();
      if (i >= 30) t.push_back(std::chrono::duration<double,std::milli>(std::chrono::steady_clock::now()-a).count()); }
    std::sort(t.begin(), t.end());
    double gf = 2.0*sh.ic*sh.oc*sh.k*sh.k*oh*oh/1e9;
    printf("%4d->%4d %3d k%d s%d: %.3f ms %.1f GFLOP/s  %s\n", sh.ic, sh.oc, sh.h, sh.k, sh.s, t[t.size()/2], gf/(t[t.size()/2]/1e3), pd.impl_info_str());
  }
}

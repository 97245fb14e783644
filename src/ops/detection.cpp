// Object-detection operators: RoiAlign-22 (same as 16) and
// NonMaxSuppression-11 (https://onnx.ai/onnx/operators/).
//
// RoiAlign: X [N, C, H, W], rois [R, 4] as (x1, y1, x2, y2) in input
// coordinates times spatial_scale, batch_indices [R] -> Y [R, C, oh, ow].
// Each output bin averages (mode avg) or takes the maximum of (mode max) a
// grid of sampling_ratio x sampling_ratio bilinear samples (or
// ceil(roi size / bins) per axis when sampling_ratio is 0). With
// coordinate_transformation_mode half_pixel the ROI is shifted by -0.5 pixel;
// with output_half_pixel (the opset-10 behaviour) it is not, and a ROI
// smaller than one pixel is widened to one. A sample outside [-1, size] reads
// 0; inside, its position is clamped to [0, size-1] before interpolation.
// Mode max keeps, per sample, the largest of the four weighted corner values
// (w_i * v_i), and then the largest over the samples: this is what the spec's
// reference implementation and ONNX Runtime compute.
//
// NonMaxSuppression: boxes [B, S, 4], scores [B, K, S] -> selected_indices
// [M, 3] int64 rows (batch, class, box), batch-major then class then in
// selection order. Per (batch, class): boxes whose score is above
// score_threshold (all boxes without that input) are visited by decreasing
// score (ties: lower index first); a box is kept unless its IoU with a box
// already kept is above iou_threshold (default 0), until
// max_output_boxes_per_class (default 0: none) are kept. Boxes are corners
// (y1, x1, y2, x2) in either order (center_point_box 0) or (xc, yc, w, h)
// (center_point_box 1); a box of zero area never suppresses anything. Kept
// boxes sit in a uniform grid (KeptBoxes) so that a candidate is tested only
// against those it can intersect: the selection is the plain greedy one.
//
// dtypes: X, rois, boxes, scores float32 / float64; batch_indices int64/int32.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/util.h"

namespace kiln::ops {

namespace {

bool is_f32_or_f64(DType t) { return t == DType::f32 || t == DType::f64; }

/// Reads a float32/float64 tensor as doubles.
std::vector<double> doubles_of(const ir::Node& n, const Tensor& t, const char* what) {
  if (!is_f32_or_f64(t.dtype())) unsupported_dtype(n, t.dtype(), what);
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    v[i] = t.dtype() == DType::f32 ? static_cast<double>(t.data<float>()[i]) : t.data<double>()[i];
  return v;
}

// ---------------------------------------------------------------- RoiAlign

struct RoiParams {
  int64_t oh, ow, sampling;
  double scale;
  bool half_pixel, max_mode;
};

RoiParams roi_params(const ir::Node& n) {
  RoiParams p;
  p.oh = n.i("output_height", 1);
  p.ow = n.i("output_width", 1);
  p.sampling = n.i("sampling_ratio", 0);
  p.scale = n.f("spatial_scale", 1.0f);
  const std::string ctm = n.s("coordinate_transformation_mode", "half_pixel");
  const std::string mode = n.s("mode", "avg");
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    fail(ErrorCode::unsupported, "{}: coordinate_transformation_mode '{}' is not supported", n.label(), ctm);
  if (mode != "avg" && mode != "max") fail(ErrorCode::unsupported, "{}: mode '{}' is not supported", n.label(), mode);
  if (p.oh < 1 || p.ow < 1 || p.sampling < 0)
    fail(ErrorCode::invalid_model, "{}: output_height/output_width must be >= 1 and sampling_ratio >= 0", n.label());
  p.half_pixel = ctm == "half_pixel";
  p.max_mode = mode == "max";
  return p;
}

std::vector<OutType> infer_roi_align(const InferContext& c) {
  const InType& x = c.in(0);
  if (!is_f32_or_f64(x.dtype)) unsupported_dtype(c.node, x.dtype, "input 0 (X)");
  if (!is_f32_or_f64(c.in(1).dtype)) unsupported_dtype(c.node, c.in(1).dtype, "input 1 (rois)");
  const DType bi = c.in(2).dtype;
  if (bi != DType::i64 && bi != DType::i32) unsupported_dtype(c.node, bi, "input 2 (batch_indices)");
  const RoiParams p = roi_params(c.node);
  ir::Dim rois = c.in(1).shape && !c.in(1).shape->empty() ? (*c.in(1).shape)[0] : ir::Dim::sym("");
  ir::Dim ch = x.shape && x.shape->size() == 4 ? (*x.shape)[1] : ir::Dim::sym("");
  return {OutType{x.dtype, ir::Shape{rois, ch, ir::Dim::known(p.oh), ir::Dim::known(p.ow)}}};
}

/// One bilinear sample of a feature map: up to four (offset, weight) pairs.
struct Sample {
  int64_t pos[4] = {0, 0, 0, 0};
  double w[4] = {0, 0, 0, 0};
};

Sample bilinear_sample(double y, double x, int64_t H, int64_t W) {
  Sample s;
  if (y < -1.0 || y > static_cast<double>(H) || x < -1.0 || x > static_cast<double>(W)) return s;
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x), y1, x1;
  if (y0 >= H - 1) {
    y0 = y1 = H - 1;
    y = static_cast<double>(y0);
  } else {
    y1 = y0 + 1;
  }
  if (x0 >= W - 1) {
    x0 = x1 = W - 1;
    x = static_cast<double>(x0);
  } else {
    x1 = x0 + 1;
  }
  const double ly = y - static_cast<double>(y0), lx = x - static_cast<double>(x0), hy = 1 - ly, hx = 1 - lx;
  s.pos[0] = y0 * W + x0;
  s.pos[1] = y0 * W + x1;
  s.pos[2] = y1 * W + x0;
  s.pos[3] = y1 * W + x1;
  s.w[0] = hy * hx;
  s.w[1] = hy * lx;
  s.w[2] = ly * hx;
  s.w[3] = ly * lx;
  return s;
}

template <class T>
void roi_align(const RoiParams& p, const Tensor& x, const std::vector<double>& rois, const std::vector<int64_t>& bidx,
               T* y) {
  const int64_t C = x.dim(1), H = x.dim(2), W = x.dim(3), R = static_cast<int64_t>(bidx.size());
  const T* xp = x.data<T>();
  const double off = p.half_pixel ? 0.5 : 0.0;
  for (int64_t r = 0; r < R; ++r) {
    const double* roi = rois.data() + r * 4;
    const double x0 = roi[0] * p.scale - off, y0 = roi[1] * p.scale - off;
    double rw = roi[2] * p.scale - off - x0, rh = roi[3] * p.scale - off - y0;
    if (!p.half_pixel) {
      rw = std::max(rw, 1.0);
      rh = std::max(rh, 1.0);
    }
    const double bh = rh / static_cast<double>(p.oh), bw = rw / static_cast<double>(p.ow);
    const int64_t gh = p.sampling > 0 ? p.sampling : static_cast<int64_t>(std::ceil(rh / static_cast<double>(p.oh)));
    const int64_t gw = p.sampling > 0 ? p.sampling : static_cast<int64_t>(std::ceil(rw / static_cast<double>(p.ow)));
    const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
    // Samples are shared by every channel: compute them once per ROI.
    std::vector<Sample> samples;
    samples.reserve(static_cast<size_t>(p.oh * p.ow * std::max<int64_t>(gh * gw, 0)));
    for (int64_t ph = 0; ph < p.oh; ++ph)
      for (int64_t pw = 0; pw < p.ow; ++pw)
        for (int64_t iy = 0; iy < gh; ++iy)
          for (int64_t ix = 0; ix < gw; ++ix)
            samples.push_back(bilinear_sample(
                y0 + static_cast<double>(ph) * bh + (static_cast<double>(iy) + 0.5) * bh / static_cast<double>(gh),
                x0 + static_cast<double>(pw) * bw + (static_cast<double>(ix) + 0.5) * bw / static_cast<double>(gw), H,
                W));
    const int64_t per_bin = std::max<int64_t>(gh * gw, 0);
#pragma omp parallel for schedule(static) if (C * p.oh * p.ow * per_bin > 8192)
    for (int64_t ch = 0; ch < C; ++ch) {
      const T* plane = xp + (bidx[r] * C + ch) * H * W;
      T* out = y + (r * C + ch) * p.oh * p.ow;
      for (int64_t bin = 0; bin < p.oh * p.ow; ++bin) {
        double acc = 0;
        bool first = true;
        for (int64_t k = 0; k < per_bin; ++k) {
          const Sample& s = samples[static_cast<size_t>(bin * per_bin + k)];
          if (!p.max_mode) {
            for (int j = 0; j < 4; ++j) acc += s.w[j] * static_cast<double>(plane[s.pos[j]]);
          } else {
            double m = s.w[0] * static_cast<double>(plane[s.pos[0]]);
            for (int j = 1; j < 4; ++j) m = std::max(m, s.w[j] * static_cast<double>(plane[s.pos[j]]));
            acc = first ? m : std::max(acc, m);
            first = false;
          }
        }
        out[bin] = static_cast<T>(p.max_mode ? acc : acc / count);
      }
    }
  }
}

void kernel_roi_align(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  const RoiParams p = roi_params(n);
  if (!is_f32_or_f64(x.dtype())) unsupported_dtype(n, x.dtype(), "input 0 (X)");
  const std::vector<double> rois = doubles_of(n, ctx.in(1), "input 1 (rois)");
  const Tensor& bt = ctx.in(2);
  if (bt.dtype() != DType::i64 && bt.dtype() != DType::i32) unsupported_dtype(n, bt.dtype(), "input 2");
  const std::vector<int64_t> bidx = to_int64s(bt);
  const int64_t R = static_cast<int64_t>(bidx.size());
  if (x.rank() != 4 || ctx.in(1).rank() != 2 || ctx.in(1).dim(1) != 4 || ctx.in(1).dim(0) != R)
    fail(ErrorCode::invalid_input, "{}: X {} must be [N, C, H, W], rois {} [R, 4] and batch_indices {} [R]",
         n.label(), x.describe(), ctx.in(1).describe(), bt.describe());
  for (int64_t b : bidx)
    if (b < 0 || b >= x.dim(0))
      fail(ErrorCode::invalid_input, "{}: batch index {} is outside [0, {})", n.label(), b, x.dim(0));
  Tensor& y = ctx.output(0, x.dtype(), {R, x.dim(1), p.oh, p.ow});
  if (x.dim(2) == 0 || x.dim(3) == 0) {
    if (y.nbytes()) std::memset(y.raw(), 0, y.nbytes());  // every sample lies outside an empty map
    return;
  }
  if (x.dtype() == DType::f32)
    roi_align<float>(p, x, rois, bidx, y.data<float>());
  else
    roi_align<double>(p, x, rois, bidx, y.data<double>());
}

// ---------------------------------------------------------------- NonMaxSuppression

/// A box as (ymin, xmin, ymax, xmax).
struct Box {
  double y0, x0, y1, x1;
};

Box box_at(const double* b, bool center) {
  if (center) return {b[1] - b[3] / 2, b[0] - b[2] / 2, b[1] + b[3] / 2, b[0] + b[2] / 2};
  return {std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

/// True when IoU(a, b) > threshold (a box without area never suppresses).
bool suppresses(const Box& a, const Box& b, double threshold) {
  const double ix = std::min(a.x1, b.x1) - std::max(a.x0, b.x0);
  const double iy = std::min(a.y1, b.y1) - std::max(a.y0, b.y0);
  if (ix <= 0 || iy <= 0) return false;
  const double inter = ix * iy;
  const double area_a = (a.x1 - a.x0) * (a.y1 - a.y0), area_b = (b.x1 - b.x0) * (b.y1 - b.y0);
  const double uni = area_a + area_b - inter;
  if (area_a <= 0 || area_b <= 0 || uni <= 0) return false;
  return inter / uni > threshold;
}

/// The boxes kept so far by one (batch, class) pass of greedy NMS, with a
/// uniform grid over them: a candidate is tested only against the kept boxes
/// that share a grid cell with it. Suppression needs a positive intersection
/// (suppresses()), and two boxes whose x and y extents overlap by a positive
/// length share a cell, so the answer is the one testing every kept box gives:
/// the selection is unchanged. What changes is the cost of batched NMS
/// (torchvision's detectors offset each class's boxes so that classes never
/// overlap, then run one NMS: 13500 boxes, 8000 kept), from O(boxes x kept)
/// box tests to about O(boxes).
class KeptBoxes {
 public:
  /// `cell`: the grid's cell edge in box units (> 0 and finite).
  explicit KeptBoxes(double cell) : cell_(cell) {}

  size_t size() const { return boxes_.size(); }

  /// True when a kept box suppresses `c` (IoU above `iou`).
  bool suppressed(const Box& c, double iou) {
    const Span sp = span(c);
    if (sp.empty) return false;  // no positive extent: intersects nothing
    if (!sp.gridded) {
      for (const Box& k : boxes_)
        if (suppresses(c, k, iou)) return true;
      return false;
    }
    for (uint32_t i : always_)
      if (suppresses(c, boxes_[i], iou)) return true;
    ++query_;
    for (int64_t cx = sp.x0; cx <= sp.x1; ++cx)
      for (int64_t cy = sp.y0; cy <= sp.y1; ++cy) {
        auto it = cells_.find(key(cx, cy));
        if (it == cells_.end()) continue;
        for (uint32_t i : it->second) {
          if (stamp_[i] == query_) continue;  // seen in another cell
          stamp_[i] = query_;
          if (suppresses(c, boxes_[i], iou)) return true;
        }
      }
    return false;
  }

  /// Keeps `b`.
  void add(const Box& b) {
    const auto i = static_cast<uint32_t>(boxes_.size());
    boxes_.push_back(b);
    stamp_.push_back(0);
    const Span sp = span(b);
    if (sp.empty) return;  // can never suppress anything
    if (!sp.gridded) {
      always_.push_back(i);
      return;
    }
    for (int64_t cx = sp.x0; cx <= sp.x1; ++cx)
      for (int64_t cy = sp.y0; cy <= sp.y1; ++cy) cells_[key(cx, cy)].push_back(i);
  }

 private:
  /// A box's cell range; `gridded` false for boxes too large for the grid
  /// (more than kMaxCells cells, or coordinates past 2^30 cells, or NaN):
  /// those are tested against every kept box / by every candidate.
  struct Span {
    bool empty = false, gridded = false;
    int64_t x0 = 0, x1 = 0, y0 = 0, y1 = 0;
  };
  static constexpr int64_t kMaxCells = 64;
  static constexpr double kMaxCell = 1073741824.0;  // 2^30

  Span span(const Box& b) const {
    Span sp;
    if (b.x0 >= b.x1 || b.y0 >= b.y1) {  // also false for NaN: handled below
      sp.empty = !(std::isnan(b.x0) || std::isnan(b.x1) || std::isnan(b.y0) || std::isnan(b.y1));
      if (sp.empty) return sp;
    }
    const double fx0 = std::floor(b.x0 / cell_), fx1 = std::floor(b.x1 / cell_);
    const double fy0 = std::floor(b.y0 / cell_), fy1 = std::floor(b.y1 / cell_);
    for (double f : {fx0, fx1, fy0, fy1})
      if (!(f > -kMaxCell && f < kMaxCell)) return sp;  // NaN or far out: not gridded
    sp.x0 = static_cast<int64_t>(fx0), sp.x1 = static_cast<int64_t>(fx1);
    sp.y0 = static_cast<int64_t>(fy0), sp.y1 = static_cast<int64_t>(fy1);
    sp.gridded = (sp.x1 - sp.x0 + 1) * (sp.y1 - sp.y0 + 1) <= kMaxCells;
    return sp;
  }

  static uint64_t key(int64_t cx, int64_t cy) {
    return (static_cast<uint64_t>(cx + (int64_t{1} << 31)) << 32) | static_cast<uint64_t>(cy + (int64_t{1} << 31));
  }

  double cell_;
  std::vector<Box> boxes_;
  std::vector<uint32_t> always_;  ///< kept boxes not in the grid
  std::unordered_map<uint64_t, std::vector<uint32_t>> cells_;
  std::vector<uint32_t> stamp_;  ///< per kept box: the last query that tested it
  uint32_t query_ = 0;
};

/// The grid cell edge for one NMS pass: the mean of the candidates' larger
/// side (finite, positive ones), so that a typical box covers 1-4 cells; 1
/// when there is none.
double grid_cell(const std::vector<Box>& cands) {
  double sum = 0;
  int64_t n = 0;
  for (const Box& b : cands) {
    const double side = std::max(b.x1 - b.x0, b.y1 - b.y0);
    if (side > 0 && std::isfinite(side)) sum += side, ++n;
  }
  const double cell = n ? sum / static_cast<double>(n) : 1.0;
  return cell > 0 && std::isfinite(cell) ? cell : 1.0;
}

/// Optional scalar input i as a double; nullopt when absent or empty.
std::optional<double> scalar_input(const ir::Node& n, const Tensor* t, const char* what) {
  if (!t || t->numel() == 0) return std::nullopt;
  if (t->numel() != 1) fail(ErrorCode::invalid_input, "{}: {} {} must be a scalar", n.label(), what, t->describe());
  return element_as_double(*t, 0);
}

/// The selected (batch, class, box) triples; inputs as the kernel sees them.
std::vector<int64_t> nms(const ir::Node& n, const Tensor& boxes_t, const Tensor& scores_t,
                         const std::vector<const Tensor*>& opt) {
  const int64_t center = n.i("center_point_box", 0);
  if (center != 0 && center != 1)
    fail(ErrorCode::invalid_model, "{}: center_point_box must be 0 or 1, got {}", n.label(), center);
  if (boxes_t.rank() != 3 || boxes_t.dim(2) != 4 || scores_t.rank() != 3 || scores_t.dim(0) != boxes_t.dim(0) ||
      scores_t.dim(2) != boxes_t.dim(1))
    fail(ErrorCode::invalid_input, "{}: boxes {} must be [B, S, 4] and scores {} [B, K, S]", n.label(),
         boxes_t.describe(), scores_t.describe());
  const std::vector<double> boxes = doubles_of(n, boxes_t, "input 0 (boxes)");
  const std::vector<double> scores = doubles_of(n, scores_t, "input 1 (scores)");
  if (opt[0] && !(opt[0]->dtype() == DType::i64 || opt[0]->dtype() == DType::i32))
    unsupported_dtype(n, opt[0]->dtype(), "input 2 (max_output_boxes_per_class)");
  // Read as an integer: exporters write INT64_MAX for "no limit" (torchvision's
  // batched_nms), which a round trip through double turns into INT64_MIN.
  int64_t max_out = 0;
  if (opt[0] && opt[0]->numel() > 0) {
    if (opt[0]->numel() != 1)
      fail(ErrorCode::invalid_input, "{}: max_output_boxes_per_class {} must be a scalar", n.label(),
           opt[0]->describe());
    max_out = opt[0]->dtype() == DType::i64 ? opt[0]->data<int64_t>()[0] : opt[0]->data<int32_t>()[0];
  }
  const double iou = scalar_input(n, opt[1], "iou_threshold").value_or(0.0);
  const std::optional<double> score_min = scalar_input(n, opt[2], "score_threshold");
  const int64_t B = boxes_t.dim(0), S = boxes_t.dim(1), K = scores_t.dim(1);
  std::vector<int64_t> out;
  std::vector<int64_t> order;
  std::vector<Box> cands;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < K; ++k) {
      const double* sc = scores.data() + (b * K + k) * S;
      order.clear();
      for (int64_t s = 0; s < S; ++s)
        if (!score_min || sc[s] > *score_min) order.push_back(s);
      std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) { return sc[i] > sc[j]; });
      cands.clear();
      for (int64_t s : order) cands.push_back(box_at(boxes.data() + (b * S + s) * 4, center == 1));
      KeptBoxes kept(grid_cell(cands));
      for (size_t i = 0; i < order.size(); ++i) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        if (kept.suppressed(cands[i], iou)) continue;
        kept.add(cands[i]);
        out.insert(out.end(), {b, k, order[i]});
      }
    }
  return out;
}

std::vector<OutType> infer_nms(const InferContext& c) {
  if (!is_f32_or_f64(c.in(0).dtype)) unsupported_dtype(c.node, c.in(0).dtype, "input 0 (boxes)");
  if (!is_f32_or_f64(c.in(1).dtype)) unsupported_dtype(c.node, c.in(1).dtype, "input 1 (scores)");
  bool all_const = c.in(0).value && c.in(1).value;
  std::vector<const Tensor*> opt(3, nullptr);
  for (size_t i = 2; i < 5; ++i)
    if (c.has(i)) {
      opt[i - 2] = c.in(i).value;
      all_const = all_const && c.in(i).value;
    }
  ir::Dim m = ir::Dim::sym("");
  if (all_const) m = ir::Dim::known(static_cast<int64_t>(nms(c.node, *c.in(0).value, *c.in(1).value, opt).size() / 3));
  return {OutType{DType::i64, ir::Shape{m, ir::Dim::known(3)}}};
}

void kernel_nms(KernelContext& ctx) {
  std::vector<const Tensor*> opt(3, nullptr);
  for (size_t i = 2; i < 5; ++i)
    if (ctx.has(i)) opt[i - 2] = &ctx.in(i);
  const std::vector<int64_t> sel = nms(ctx.node, ctx.in(0), ctx.in(1), opt);
  Tensor& y = ctx.output(0, DType::i64, {static_cast<int64_t>(sel.size() / 3), 3});
  std::copy(sel.begin(), sel.end(), y.data<int64_t>());
}

}  // namespace

/// Registers RoiAlign and NonMaxSuppression.
void register_detection(Registry& r) {
  r.add({"", "RoiAlign", infer_roi_align, kernel_roi_align});
  r.add({"", "NonMaxSuppression", infer_nms, kernel_nms});
}

}  // namespace kiln::ops

// Float64 references of Shampoo and SOAP, written plainly (one step a function of the previous
// state, no in-place tricks, every quantity in double) to check core/optim's float32 versions
// against: the same algorithm, so they agree to float32 rounding; an algorithmic slip does not.
#pragma once

#include "core/optim/optim.h"

#include <ATen/core/Tensor.h>

#include <vector>

namespace mfsdp::reference {

class ShampooRef {
 public:
  ShampooRef(ShampooOptions o, std::vector<int64_t> shape);
  // Returns the new parameter (float64) after one step from `param` with `grad`.
  at::Tensor step(const at::Tensor& param, const at::Tensor& grad);

 private:
  ShampooOptions o_;
  int64_t t_ = 0;
  std::vector<at::Tensor> L_, R_, Lroot_, Rroot_, M_, V_;
  bool have_roots_ = false;
};

class SoapRef {
 public:
  SoapRef(SoapOptions o, std::vector<int64_t> shape);
  at::Tensor step(const at::Tensor& param, const at::Tensor& grad);

 private:
  SoapOptions o_;
  int64_t t_ = 0;
  bool started_ = false;
  at::Tensor m_, v_, GL_, GR_, QL_, QR_;  // m, v in the eigenbasis
};

}  // namespace mfsdp::reference

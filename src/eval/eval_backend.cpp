#include "eval/eval_backend.h"

#include "core/error.h"

namespace kvdice::eval {

std::unique_ptr<backend::Backend> make_eval_backend(const std::string& name, int threads) {
  if (name == "cpu" || name == "auto") return backend::make_cpu_backend(threads);
  if (name == "cuda")
    fail("--backend cuda: this kvdice was built without the CUDA backend (-DKVDICE_CUDA=ON)");
  fail("--backend must be cpu, cuda or auto (got '{}')", name);
}

}  // namespace kvdice::eval

#include "eval/eval_backend.h"

#include "core/error.h"

namespace kvdice::eval {

std::unique_ptr<backend::Backend> make_eval_backend(const std::string& name, int threads) {
  return backend::make_backend({name, threads, 0});
}

}  // namespace kvdice::eval

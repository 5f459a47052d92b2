// Options of a policy, written after its name on the command line or in a request:
// "random_block_pp:block=16" or "vase:n_large=128,sinks=4". Each policy reads the keys it knows with
// the reference's defaults; a key nobody read is an error, and every option actually used (given or
// defaulted) is recorded so that run headers and JSON state the full setting.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvdice::policy {

class PolicyOptions {
 public:
  // Splits "name[:key=value[,key=value...]]"; Error naming the malformed part.
  explicit PolicyOptions(std::string_view spec);

  const std::string& name() const { return name_; }
  // The value given for `key`, or `fallback`; Error when the text is not a number in [lo, hi].
  int get_int(std::string_view key, int fallback, int lo, int hi);
  double get_double(std::string_view key, double fallback, double lo, double hi);
  // The text given for `key` (a file path: no ',' possible), or `fallback`.
  std::string get_string(std::string_view key, std::string fallback);
  // The value stated for `key`, with no default: what a CUDA file's binder reads from a spec that
  // describe() wrote (every option in effect stated). Error naming the key when it is absent or malformed.
  int require_int(std::string_view key);
  double require_double(std::string_view key);
  std::string require_string(std::string_view key);
  // Error naming every given key that no get_* call read.
  void finish() const;
  // "key=value,..." of every option read, in reading order (empty without options).
  std::string canonical() const;

 private:
  std::string name_;
  std::map<std::string, std::string, std::less<>> given_;
  std::vector<std::string> read_keys_;
  std::vector<std::pair<std::string, std::string>> used_;
};

}  // namespace kvdice::policy

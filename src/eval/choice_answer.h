// Multiple-choice answers (GPQA style): the letter a completion settles on.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvdice::eval {

// The answer letter among the first `choices` letters: the last \boxed{X} when present, else the
// last standalone letter (not touching another letter or digit), e.g. "(C)", "C.", "answer: C".
std::optional<char> extract_choice(std::string_view completion, int choices);
// A gold answer "C", "(C)" or " c " -> 'C'; nullopt when it is not one letter.
std::optional<char> parse_choice_gold(std::string_view gold, int choices);

}  // namespace kvdice::eval

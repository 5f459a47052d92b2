#!/usr/bin/env bash
# Installs the Debian packages kvdice builds and tests with. Idempotent: does nothing when all are present.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config python3 python3-pip
      libopenblas-dev libpcre2-dev nlohmann-json3-dev libcli11-dev libutf8proc-dev libfmt-dev
      libgtest-dev libcpp-httplib-dev libssl-dev clang libclang-rt-14-dev
      libsqlite3-dev zlib1g-dev libginac-dev libseccomp-dev libplplot-dev plplot-driver-cairo prometheus-cpp-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=""; [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Python packages (pinned): the openai client and schemathesis the server tests drive kvdice serve with;
# nanobind, scikit-build-core and NumPy the Python package builds with, pytest for both.
have=$(python3 -m pip freeze 2>/dev/null | tr 'A-Z-' 'a-z_' | sort)  # names as pip freeze spells them
for req in "$(dirname "$0")/../tests/server/requirements.txt" "$(dirname "$0")/../python/requirements.txt"; do
  wanted=$(grep -v '^#' "$req" | tr 'A-Z-' 'a-z_' | sort)
  if [[ -n $(comm -23 <(echo "$wanted") <(echo "$have")) ]]; then
    echo "install-deps: installing $req"
    python3 -m pip install -q --root-user-action=ignore -r "$req"
  fi
done

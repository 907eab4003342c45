# Shared by the ops/ scripts: where things live, and small helpers. Sourced, not run.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SERVICES="$ROOT/.services"        # ignored by git: downloads, installs, data, logs, pids
VENV="$ROOT/.venv"
export OPENSEARCH_JAVA_HOME=${OPENSEARCH_JAVA_HOME:-/usr/lib/jvm/java-17-openjdk-amd64}
mkdir -p "$SERVICES/logs" "$SERVICES/run"

# Debian packages, one installer at a time: ops/test prepares the services, chromium and the
# container engine side by side, and apt refuses a second caller while one holds its locks.
apt_install() {
  flock "$SERVICES/run/apt.lock" bash -c \
    'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"' apt_install "$@"
}

say() { printf '\033[1m[situate]\033[0m %s\n' "$*" >&2; }

python_bin() {
  # Python 3.11 is what the project targets; fall back to python3 if it is 3.11+.
  for p in python3.11 python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      echo "$p"; return
    fi
  done
  say "Python 3.11+ is required"; exit 1
}

# A URL fit to print: credentials replaced (never echo a password into a terminal or a CI log).
mask_url() { echo "$1" | sed -E 's#(://)[^/@]*@#\1***@#'; }

redis_url() { echo "${SITUATE_REDIS_URL:-redis://127.0.0.1:6379/0}"; }
opensearch_url() { local u="${SITUATE_OPENSEARCH_URL:-http://127.0.0.1:9200}"; echo "${u%%,*}"; }  # the first of several

# llama-cpp-python is published as source only: pip compiles llama.cpp. By default llama.cpp is
# tuned to the CPU it is built on (GGML_NATIVE); on a machine here with AVX-512 and AMX such a
# build crashed (SIGSEGV) on document-sized prompts, and a wheel built on one CPU may not run on
# another. So: built for the x86-64 baseline llama.cpp offers without native tuning (AVX2, FMA,
# F16C: every x86-64 server CPU since 2013), without the multimodal library we do not use.
# Two changes only make the build cheaper (4 CPU-minutes instead of 10, same speed at run time,
# measured on a 1,700-token prompt): sources compiled in batches (CMAKE_UNITY_BUILD), and
# without llama.cpp's "common" library, which only its own tools use and which
# llama-cpp-python turns on unconditionally (one line of its CMakeLists.txt, patched below).
# pip's wheel cache does not key on CMAKE_ARGS, so the build bypasses it, and a stamp in the
# venv records the flags it was built with.
LLAMA_VERSION=$(sed -n 's/.*"llama-cpp-python==\([0-9.]*\)".*/\1/p' "$ROOT/pyproject.toml")
LLAMA_CMAKE_ARGS="${SITUATE_LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DCMAKE_UNITY_BUILD=ON}"

# llama.cpp's own OpenAI-compatible server (``llama-server``), for the tests and benchmarks of the
# openai contextualizer against real servers: built from the same source llama-cpp-python vendors
# (the same llama.cpp, the same CPU baseline), the server target only, into the venv's bin/.
# Without its web UI (which would be fetched from Hugging Face at build time) and without OpenSSL.
# common/ and the server's own libraries compile as unity builds except for the few files that
# break in one (ops/llama-server.cmake names them).
LLAMA_SERVER_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DCMAKE_UNITY_BUILD=ON -DBUILD_SHARED_LIBS=OFF \
 -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
 -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF"

llama_server_installed() {
  [ "$(cat "$VENV/.llama-server-build" 2>/dev/null)" = "$LLAMA_VERSION $LLAMA_SERVER_CMAKE_ARGS" ] \
    && [ -x "$VENV/bin/llama-server" ]
}

llama_sdist() {  # the sdist, downloaded once (pip checks its hash against the index)
  local file="$SERVICES/downloads/llama_cpp_python-$LLAMA_VERSION.tar.gz"
  if [ ! -f "$file" ]; then
    mkdir -p "$SERVICES/downloads"
    "$VENV/bin/python" -m pip download -q --no-cache-dir --no-deps --no-binary llama-cpp-python \
      -d "$SERVICES/downloads" "llama-cpp-python==$LLAMA_VERSION" >&2
  fi
  echo "$file"
}

build_llama_server() {
  local work="$SERVICES/wheels/llama-server-src" built=0
  local src="$work/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp"
  rm -rf "$work" && mkdir -p "$work" "$SERVICES/logs"
  {
    tar -xzf "$(llama_sdist)" -C "$work" \
    && cmake -S "$src" -B "$work/build" -DCMAKE_PROJECT_INCLUDE="$ROOT/ops/llama-server.cmake" $LLAMA_SERVER_CMAKE_ARGS \
    && cmake --build "$work/build" --target llama-server -j "$(nproc)" \
    && install -m 755 "$work/build/bin/llama-server" "$VENV/bin/llama-server" \
    && echo "$LLAMA_VERSION $LLAMA_SERVER_CMAKE_ARGS" > "$VENV/.llama-server-build"
  } >"$SERVICES/logs/llama-server-build.log" 2>&1 || built=$?
  rm -rf "$work"
  return $built
}

llama_installed() {
  [ "$(cat "$VENV/.llama-build" 2>/dev/null)" = "$LLAMA_VERSION $LLAMA_CMAKE_ARGS" ] \
    && "$VENV/bin/python" -c 'import llama_cpp' 2>/dev/null
}

# Compile the wheel only (nothing in the venv changes): ops/setup runs it while pip installs
# the rest, so the compile overlaps the downloads.
# (--no-binary for this one package only: for all, pip would build its build tools from source too.)
build_llama_wheel() {
  local src="$SERVICES/wheels/llama-src"
  rm -rf "$SERVICES/wheels/llama" "$src" && mkdir -p "$SERVICES/wheels/llama" "$src" "$SERVICES/logs"
  {
    tar -xzf "$(llama_sdist)" -C "$src" \
    && sed -i 's/set(LLAMA_BUILD_COMMON ON CACHE/set(LLAMA_BUILD_COMMON OFF CACHE/' \
      "$src/llama_cpp_python-$LLAMA_VERSION/CMakeLists.txt" \
    && ! grep -q 'set(LLAMA_BUILD_COMMON ON' "$src/llama_cpp_python-$LLAMA_VERSION/CMakeLists.txt" \
    && CMAKE_ARGS="$LLAMA_CMAKE_ARGS" "$VENV/bin/python" -m pip wheel -q --no-cache-dir --no-deps \
      -w "$SERVICES/wheels/llama" "$src/llama_cpp_python-$LLAMA_VERSION"
  } >"$SERVICES/logs/llama-build.log" 2>&1
  local built=$?
  rm -rf "$src"
  return $built
}

llama_build_failed() { tail -30 "$SERVICES/logs/llama-build.log" >&2; say "llama-cpp-python failed to build"; exit 1; }

install_llama() {
  llama_installed && return
  if ! ls "$SERVICES"/wheels/llama/llama_cpp_python-*.whl >/dev/null 2>&1; then
    say "compiling llama-cpp-python $LLAMA_VERSION ($LLAMA_CMAKE_ARGS), about 2 minutes on 2 cores"
    build_llama_wheel || llama_build_failed
  fi
  "$VENV/bin/python" -m pip install -q --force-reinstall --no-deps "$SERVICES"/wheels/llama/llama_cpp_python-*.whl
  rm -rf "$SERVICES/wheels/llama"
  echo "$LLAMA_VERSION $LLAMA_CMAKE_ARGS" > "$VENV/.llama-build"
}

# Go modules the deployment tests need, each pinned by its version and its module hash (the
# "h1:" of go.sum; `go` also checks it against the checksum database).
HELM_MODULE="helm.sh/helm/v3@v3.16.4"
HELM_SUM="h1:rBn/h9MACw+QlhxQTjpl8Ifx+VTWaYsw3rguGBYBzr0="
KEDA_MODULE="github.com/kedacore/keda/v2@v2.16.1"  # its CRDs: the ScaledObject schema the chart is checked against
KEDA_SUM="h1:LfYsxfSX8DjetLW8q9qnriImH936POrQJvE+caRoScI="

go_module() {  # go_module MODULE@VERSION SUM: download it (once), check its hash, print its folder
  local info; info=$(go mod download -json "$1")
  local sum; sum=$(echo "$info" | sed -n 's/.*"Sum": "\(.*\)".*/\1/p')
  [ "$sum" = "$2" ] || { say "$1 has hash $sum, not the pinned $2: refused"; return 1; }
  echo "$info" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p'
}

install_helm() {  # helm, built from its module (no release binary is reachable here), into .services/bin
  local bin="$SERVICES/bin/helm"
  [ -x "$bin" ] && [ "$(cat "$SERVICES/bin/.helm" 2>/dev/null)" = "$HELM_MODULE" ] && return
  command -v go >/dev/null || { say "installing Go (Debian package) to build helm"; \
    apt_install golang-go >/dev/null; }
  go_module "$HELM_MODULE" "$HELM_SUM" >/dev/null
  mkdir -p "$SERVICES/bin"
  GOBIN="$SERVICES/bin" go install -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@${HELM_MODULE#*@}"
  echo "$HELM_MODULE" > "$SERVICES/bin/.helm"
}

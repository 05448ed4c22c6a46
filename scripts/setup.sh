# Shared by scripts/test and scripts/demo (sourced): installs, idempotently and quickly when
# already there, what building the wasm package and running the tests need on a fresh Debian
# machine with rustup. Functions, so each script takes what it needs.

step() { printf '\n==> %s\n' "$*"; }

apt_install() { # command-or-package pairs: cmd:package ...
  local missing=() pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
  done
  [ ${#missing[@]} -eq 0 ] || apt_get_install "${missing[@]}"
}

apt_get_install() { # packages ...
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

setup_rust() {
  step "toolchain: rustfmt, clippy, wasm32 target"
  rustup component add rustfmt clippy >/dev/null
  rustup target add wasm32-unknown-unknown >/dev/null
}

setup_node() {
  step "Node and npm (apt-get, when missing)"
  apt_install node:nodejs npm:npm
  echo "node $(node --version), npm $(npm --version)"
}

setup_browser() {
  step "browser: chromium, chromium-driver (apt-get, when missing)"
  apt_install chromium:chromium chromedriver:chromium-driver
  echo "$(chromium --version), $(chromedriver --version | cut -d' ' -f1-2)"
}

# The server binaries that scripts/throwaway-postgres runs for the PostgreSQL store's tests
# (Debian keeps them off PATH, in /usr/lib/postgresql/VERSION/bin). No service is used: each
# test process starts its own throwaway server.
setup_postgres() {
  step "PostgreSQL server binaries (apt-get, when missing)"
  if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    apt_get_install postgresql
  fi
  local initdb
  initdb=$(command -v initdb || ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)
  "$initdb" --version
}

setup_wasm_tools() {
  step "wasm tools: wasm-pack, wasm-bindgen-cli at the pinned version, npm packages"
  export PATH="$HOME/.cargo/bin:$PATH"
  command -v wasm-pack >/dev/null || cargo install wasm-pack
  # wasm-pack must find a wasm-bindgen CLI of exactly the version Cargo.lock pins.
  local bindgen
  bindgen=$(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"/\1/p')
  if [ "$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $bindgen" ]; then
    cargo install wasm-bindgen-cli --version "$bindgen"
  fi
  # typescript, playwright-core, and binaryen's wasm-opt (Debian's is too old for this wasm).
  if [ ! tests/js/node_modules/.package-lock.json -nt tests/js/package-lock.json ]; then
    npm ci --prefix tests/js --no-audit --no-fund
  fi
  echo "$(wasm-pack --version), wasm-bindgen $bindgen, $(tests/js/node_modules/.bin/wasm-opt --version)"
}

# The demo page's dependencies: the freshly built package, installed as a copy (not a link:
# the server serves only files under www/).
setup_page() {
  step "demo page: npm install of the built agentwire package into www/"
  npm ci --prefix www --install-links --no-audit --no-fund --loglevel=error
}

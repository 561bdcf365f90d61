#!/usr/bin/env bash
# Runs every test of dispatchscope, installing what the tests need from the system first.
# This is the README's test command; .ci/run runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# --- system packages the tests need (Debian/Ubuntu) ---------------------------------------------
# lavapipe (Vulkan on the CPU) and the loader, Xvfb for the real-window test, ImageMagick for its
# screenshot, the Khronos validation layer and Debian's spirv-val for the Vulkan backend's tests.
packages=(mesa-vulkan-drivers libvulkan1 xvfb x11-utils imagemagick vulkan-validationlayers spirv-tools)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "installing: ${missing[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt

export CARGO_TERM_COLOR=never
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"; chmod 0700 "$XDG_RUNTIME_DIR"
export DISPATCHSCOPE_REQUIRE_VULKAN=1

echo "== format"
cargo fmt --all --check

echo "== layering: core never depends on egui, eframe or winit; views never on ash"
if cargo tree -p dispatchscope-core -e normal,build --prefix none | grep -E '^(egui|eframe|winit|egui_[a-z]+) ' ; then
    echo "layering violated: dispatchscope-core depends on a UI crate (above)"; exit 1
fi
if cargo tree -p dispatchscope-views -e normal --prefix none | grep -E '^(ash|rfd) ' ; then
    echo "layering violated: dispatchscope-views depends on ash or rfd (above)"; exit 1
fi

echo "== clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== tests"
cargo test --workspace --locked

if [ -x .ci/window-test.sh ]; then
    echo "== the real binary in a real window"
    bash .ci/window-test.sh
fi
echo "all checks passed"

#!/usr/bin/env bash
# Builds the cep image (default tag cep:local, or $CEP_IMAGE) from this repository's files only:
# a statically linked release binary in a scratch image, so no base image is pulled.
set -euo pipefail
cd "$(dirname "$0")/../.."
image=${CEP_IMAGE:-cep:local}
RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release -p cep --target x86_64-unknown-linux-gnu --target-dir target/static
mkdir -p deploy/docker/dist
cp target/static/x86_64-unknown-linux-gnu/release/cep deploy/docker/dist/cep
strip deploy/docker/dist/cep
rm -rf deploy/docker/dist/rules && cp -r rules deploy/docker/dist/rules
docker build --quiet --tag "$image" --file deploy/docker/Dockerfile deploy/docker/dist >/dev/null
echo "built $image"

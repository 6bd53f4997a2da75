# Sourced by the scripts that run on the GPU machine (gpu_tier.sh, vllm/gpu_run.sh): what each needs first.

# The GPU machine reaches no package index: the wheels the package needs beyond its image (lz4, zstandard)
# are carried in .whl/deps (pip download --python-version 3.12 --only-binary :all: lz4 zstandard).
install_carried_wheels() {
  if [ -d .whl/deps ]; then python3 -m pip install -q --no-deps --no-index .whl/deps/*.whl 2>&1 | grep -v -i warning; fi
  return 0
}

# build_native SOURCE_DIR LOG: libfoundry.so into SOURCE_DIR/build/gpu, the output into LOG.
build_native() {
  { cmake -S "$1" -B "$1/build/gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build "$1/build/gpu"; } > "$2" 2>&1
}

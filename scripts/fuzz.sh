#!/usr/bin/env bash
# Fuzzes every parser and entry point that reads input we did not write.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Runs each cargo-fuzz target in fuzz/ for SECONDS (default 60), under a memory limit so an
# over-allocation is a finding, seeded from the repository's own files (tests, templates,
# topologies the tool exports) and from ../shared/corpus when it exists. Installs the nightly
# toolchain and cargo-fuzz when they are missing. Findings land in fuzz/artifacts/TARGET/;
# the script exits non-zero when any target found one. Each finding becomes a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
all_targets=(spec topology_json nccl_topology_xml msccl_xml schedule_json plan_json c_api plugin_env)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
# Per input: a slow input (timeout) or an allocation past the limit is a finding.
rss_mb=${FUZZ_RSS_MB:-2048}
timeout_s=${FUZZ_TIMEOUT_S:-10}

rustup run nightly rustc --version >/dev/null 2>&1 || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked

# Seeds: written fresh each run into fuzz/seeds (ignored by git); libFuzzer keeps what it
# learns in fuzz/corpus/TARGET (also ignored).
seeds=fuzz/seeds
rm -rf "$seeds"
mkdir -p "$seeds"/{spec,topology_json,nccl_topology_xml,msccl_xml,schedule_json,plan_json,c_api,plugin_env}
cargo build --release --quiet --bin tacos
tacos=target/release/tacos
i=0
while read -r spec; do
  case "$spec" in ''|'#'*) continue ;; esac
  i=$((i + 1))
  printf '%s' "$spec" >"$seeds/spec/$i"
  printf 'TACOS_TOPOLOGY=%s\n' "$spec" >"$seeds/plugin_env/$i"
  "$tacos" topo export "$spec" -o "$seeds/topology_json/$i.json" >/dev/null 2>&1 || true
done < tests/lowering_sweep.txt
for spec in ring:4 mesh:2x2 torus:3x3; do
  "$tacos" synth "$spec" -c allreduce -o "$seeds/schedule_json/$spec.json" --quiet >/dev/null 2>&1 || true
  "$tacos" synth "$spec" -c allgather -s 1MiB --plan "$seeds/plan_json/$spec.json" --quiet >/dev/null 2>&1 || true
done
"$tacos" synth preset:dgx-h100,nodes=1 -c allreduce -s 256MiB --plan "$seeds/plan_json/nvls.json" --quiet >/dev/null 2>&1 || true
# The plugins' environment with FIFOs for settings, and with a cache of its own whose band
# records are replaced (here by a record of another band, and by nothing) and locked.
printf 'TACOS_TOPOLOGY=ring:4\nFIFO=TACOS_PROFILE\nFIFO=NCCL_TOPO_FILE\n' >"$seeds/plugin_env/fifos"
printf 'FIFO=TACOS_TOPOLOGY\n' >"$seeds/plugin_env/fifo-topology"
record=$(mktemp -d)
TACOS_CACHE_DIR="$record" TACOS_TOPOLOGY=ring:4 TACOS_NCCL_MARGIN=off "$tacos" compile --plugin-cache 4 >/dev/null 2>&1 || true
first=$(find "$record" -path '*bands/allgather*.json' | head -n 1)
{ printf 'TACOS_TOPOLOGY=ring:4\nTACOS_NCCL_MARGIN=off\nCACHE=1\n\n\n'; [ -n "$first" ] && cat "$first"; } >"$seeds/plugin_env/record"
printf 'TACOS_TOPOLOGY=ring:4\nCACHE=1\n\n\n' >"$seeds/plugin_env/empty-record"
rm -rf "$record"
cp xml-templates/*.xml "$seeds/msccl_xml/"
cp xml-templates/*.xml "$seeds/c_api/"
if [ -d ../shared/corpus ]; then
  find ../shared/corpus -path '*msccl*' -name '*.xml' -exec cp {} "$seeds/msccl_xml/" \;
  find ../shared/corpus -path '*nccl-topo*' -name '*.xml' -exec cp {} "$seeds/nccl_topology_xml/" \;
else
  echo "fuzz: ../shared/corpus not found; seeding from the repository's own files only"
fi

failed=()
for target in "${targets[@]}"; do
  echo "fuzz: $target for ${seconds}s"
  mkdir -p "fuzz/corpus/$target"
  if ! (cd fuzz && cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
      -max_total_time="$seconds" -rss_limit_mb="$rss_mb" -malloc_limit_mb="$rss_mb" \
      -timeout="$timeout_s" -print_final_stats=1 2>&1 | tail -n 25); then
    failed+=("$target")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]} (inputs in fuzz/artifacts/)"
  exit 1
fi
echo "fuzz: no findings"

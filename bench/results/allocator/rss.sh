#!/bin/bash
# Resident memory of one cumulus-train convnet run (1 worker, STEPS steps), sampled every second
# from /proc: prints "seconds rss_mib" lines, then the run's last progress line.
#   bench/results/allocator/rss.sh default|training [STEPS]
set -euo pipefail
mode=$1; steps=${2:-600}
root="$(cd "$(dirname "$0")/../../.." && pwd)"
run_dir=$(mktemp -d)
CUMULUS_MALLOC=$mode "$root/build/bin/cumulus-train" "$root/configs/fashion_mnist_convnet.yaml" \
  --set trainer.max_steps="$steps" --set trainer.run_dir="$run_dir" --set checkpoint.every_steps=0 --set checkpoint.every_seconds=0 \
  > "$run_dir/log" 2>&1 &
pid=$!
start=$(date +%s)
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
  [ -n "$rss" ] && echo "$(( $(date +%s) - start )) $(( rss / 1024 ))"
  sleep 1
done
wait "$pid"
grep -E "step $steps/|trained" "$run_dir/log" | tail -2
rm -rf "$run_dir"

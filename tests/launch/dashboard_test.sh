#!/usr/bin/env bash
# Tests launch/dashboard.html in headless Chromium, against the run in
# dashboard_fixture.json:
#   1. the static report (the fixture embedded as cumulus-report does it):
#      the DOM after the scripts ran holds the expected plot points, timeline
#      events, goodput segments and share bars (dashboard_check.py says which);
#   2. the same without a status (the samples/s plot from the train records);
#   3. a screenshot of the report, 1280x900, written to $1 (default: a temp
#      file that is removed) and checked to be a PNG of that size;
#   4. live mode: dashboard_server.py serves the page and the API on loopback,
#      40 records a response, and the DOM must hold every point (the page
#      polled and appended);
#   5. live mode with no server: the page says "disconnected, retrying".
# Usage: dashboard_test.sh [SCREENSHOT.png]; CHROMIUM=/path/to/chromium to
# choose the browser. Exits nonzero with a message on the first failure.
set -euo pipefail

start_s=$SECONDS
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
page=$root/launch/dashboard.html
fixture=$here/dashboard_fixture.json

fail() { echo "dashboard_test: FAIL: $*" >&2; exit 1; }

python=${CUMULUS_PYTHON:-$root/.venv/bin/python}
[[ -x $python ]] || python=$(command -v python3) || fail "no python3"
chromium=${CHROMIUM:-}
if [[ -z $chromium ]]; then
  for c in chromium-headless-shell chromium chromium-browser google-chrome; do
    if chromium=$(command -v "$c"); then break; fi
    chromium=
  done
fi
[[ -n $chromium ]] || fail "no Chromium found: install chromium-headless-shell or set CHROMIUM"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dashboard_test.XXXXXX")
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

shot=${1:-$tmp/dashboard.png}
mkdir -p "$(dirname "$shot")"
shot=$(cd "$(dirname "$shot")" && pwd)/$(basename "$shot")

# browse NAME CHROMIUM_ARGS...: one time-bounded headless run with a fresh
# profile; its stderr goes to $tmp/NAME.log and is shown if it fails.
browse() {
  local name=$1 rc=0
  shift
  timeout 60 "$chromium" --headless --no-sandbox --disable-gpu --no-first-run --hide-scrollbars \
    --user-data-dir="$(mktemp -d "$tmp/profile.XXXXXX")" --virtual-time-budget=5000 "$@" \
    2>"$tmp/$name.log" || rc=$?
  if ((rc)); then
    tail -n 20 "$tmp/$name.log" >&2
    ((rc == 124)) && fail "chromium ($name) ran past 60 s"
    fail "chromium ($name) exited with $rc"
  fi
}

check_dom() {  # check_dom NAME MODE: the DOM in $tmp/NAME.dom against the fixture
  echo "dashboard_test: $1"
  "$python" "$here/dashboard_check.py" dom "$tmp/$1.dom" "$fixture" "$2" || fail "$1: the DOM is not as expected (above)"
}

# 1, 2. The static report, with and without status.
"$python" "$here/dashboard_check.py" embed "$page" "$fixture" "$tmp/report.html"
"$python" "$here/dashboard_check.py" embed "$page" "$fixture" "$tmp/report-no-status.html" --no-status
browse report --dump-dom "file://$tmp/report.html" >"$tmp/report.dom"
check_dom report static
browse report-no-status --dump-dom "file://$tmp/report-no-status.html" >"$tmp/report-no-status.dom"
check_dom report-no-status static-no-status

# 3. The screenshot.
rm -f "$shot"
browse screenshot --window-size=1280,900 --screenshot="$shot" "file://$tmp/report.html"
[[ -s $shot ]] || fail "no screenshot at $shot"
"$python" "$here/dashboard_check.py" png "$shot" 1280 900 || fail "bad screenshot $shot"
echo "dashboard_test: screenshot $shot ($(stat -c %s "$shot") bytes)"

# 4. Live mode against a stand-in server on loopback.
"$python" "$here/dashboard_server.py" "$page" "$fixture" 40 >"$tmp/port" 2>"$tmp/server.log" &
server_pid=$!
for _ in $(seq 100); do
  [[ -s $tmp/port ]] && break
  kill -0 "$server_pid" 2>/dev/null || fail "the test server exited: $(cat "$tmp/server.log")"
  sleep 0.1
done
port=$(head -n 1 "$tmp/port")
[[ $port =~ ^[0-9]+$ ]] || fail "the test server printed no port"
browse live --dump-dom "http://127.0.0.1:$port/" >"$tmp/live.dom"
check_dom live live
grep -q "^records after=[1-9]" "$tmp/server.log" ||
  fail "the page never asked for records after the first batch: $(tr '\n' ' ' <"$tmp/server.log")"
echo "  polls: $(grep -c '^records' "$tmp/server.log") records, $(grep -c '^status' "$tmp/server.log") status"

# 5. Live mode with nothing to poll: no exception, and the indicator says so.
browse offline --dump-dom "file://$page" >"$tmp/offline.dom"
grep -q '<span id="live" class="bad">disconnected, retrying</span>' "$tmp/offline.dom" ||
  fail "offline: #live does not say 'disconnected, retrying'"
grep -Eq '<body[^>]* data-renders="[1-9]' "$tmp/offline.dom" || fail "offline: the page never rendered"
echo "dashboard_test: offline page says disconnected, retrying"

echo "dashboard_test: PASS ($((SECONDS - start_s)) s, $chromium)"

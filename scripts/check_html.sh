#!/usr/bin/env bash
# Checks a perf-compare HTML page in headless Chromium (Debian's `chromium`): the page must render
# with no console output at all (the page logs only when a chart is empty, and network fetches
# are blocked so a stray external resource shows up as a console error), report
# data-rendered="ok", and hold at least N charts. Saves a screenshot as a test artefact.
#
#   scripts/check_html.sh PAGE.html [SCREENSHOT.png] [--min-charts N]
#   CHROMIUM=/path/to/chrome scripts/check_html.sh ...
# Exit: 0 pass, 1 check failed, 2 usage, 77 Chromium not installed (ctest SKIP_RETURN_CODE).
set -euo pipefail

say() { printf '[check_html] %s\n' "$*" >&2; }
page="" shot="" min_charts=1
while [ $# -gt 0 ]; do
  case "$1" in
    --min-charts) min_charts="${2:?--min-charts needs a number}"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) if [ -z "$page" ]; then page="$1"; elif [ -z "$shot" ]; then shot="$1"; else say "unexpected argument: $1"; exit 2; fi; shift ;;
  esac
done
[ -n "$page" ] || { say "usage: scripts/check_html.sh PAGE.html [SCREENSHOT.png] [--min-charts N]"; exit 2; }
[ -f "$page" ] || { say "$page: no such file"; exit 2; }

chromium="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}"
if [ -z "$chromium" ]; then
  say "Chromium not found (Debian: apt-get install chromium, or set CHROMIUM): skipped"
  exit 77
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
url="file://$(cd "$(dirname "$page")" && pwd)/$(basename "$page")"
# --no-sandbox: CI containers run as root, where Chromium's sandbox refuses to start; the page is
# our own local file. The resolver rule makes every host unresolvable: the page must need no network.
flags=(--headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run
       --hide-scrollbars --user-data-dir="$work/profile" --host-resolver-rules="MAP * ~NOTFOUND")

if ! timeout 120 "$chromium" "${flags[@]}" --enable-logging=stderr --v=0 --virtual-time-budget=3000 \
      --dump-dom "$url" > "$work/dom.html" 2> "$work/chromium.log"; then
  say "Chromium failed to load $page:"; tail -20 "$work/chromium.log" >&2; exit 1
fi
failed=0
# Self-contained: no external script, stylesheet, image or font (failed loads do not always reach
# the console, so the markup is checked directly).
if grep -Eiq '(src|href)=["'"'"']?(https?:)?//|url\(["'"'"']?(https?:)?//|@import' "$page"; then
  say "$page: references an external resource (the page must open without network):"
  grep -Eio '(src|href)=["'"'"']?(https?:)?//[^"'"'"' >]*|url\(["'"'"']?(https?:)?//[^)]*|@import[^;]*' "$page" | head -5 >&2
  failed=1
fi
# Chromium logs every console message (log, warn, error, uncaught exceptions) as INFO:CONSOLE.
if grep -q 'CONSOLE' "$work/chromium.log"; then
  say "console output while rendering $page:"; grep 'CONSOLE' "$work/chromium.log" >&2; failed=1
fi
if ! grep -q 'data-rendered="ok"' "$work/dom.html"; then
  say "$page: the page's check script did not report data-rendered=\"ok\" (script error or empty chart)"; failed=1
fi
charts=$(grep -o 'data-chart="[^"]*"' "$work/dom.html" | wc -l)
if [ "$charts" -lt "$min_charts" ]; then
  say "$page: $charts charts rendered, expected at least $min_charts"; failed=1
fi

if [ -n "$shot" ]; then
  mkdir -p "$(dirname "$shot")"
  rm -f "$shot"
  timeout 120 "$chromium" "${flags[@]}" --window-size=1280,2400 --screenshot="$shot" "$url" \
    > /dev/null 2>> "$work/chromium.log" || true
  if [ ! -s "$shot" ] || [ "$(head -c 4 "$shot" | tail -c 3)" != "PNG" ]; then
    say "$page: no screenshot written to $shot"; failed=1
  else
    say "screenshot: $shot"
  fi
fi
[ "$failed" = 0 ] && say "ok: $page renders with $charts charts and no console output"
exit "$failed"

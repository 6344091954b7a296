#!/usr/bin/env bash
# Installs what codecell needs on a Debian host, only what is missing.
set -euo pipefail
need=()
command -v runc >/dev/null || need+=(runc)
command -v runsc >/dev/null || need+=(runsc)
[ -x /usr/bin/python3 ] || need+=(python3)
for mod in numpy pandas scipy matplotlib plotly pytest pygame; do
  /usr/bin/python3 -c "import $mod" 2>/dev/null || need+=("python3-$mod")
done
command -v node >/dev/null || need+=(nodejs)
command -v Xvfb >/dev/null || need+=(xvfb)
command -v pgrep >/dev/null || need+=(procps)
command -v chromium >/dev/null || need+=(chromium) # the live view's browser test
command -v xeyes >/dev/null || need+=(x11-apps)     # plain X programs on a sandbox's display
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# playwright-core drives that Chromium; it comes from the npm registry.
browser="$(dirname "$0")/../test/browser"
[ -d "$browser/node_modules/playwright-core" ] || (cd "$browser" && npm ci --no-audit --no-fund --silent)

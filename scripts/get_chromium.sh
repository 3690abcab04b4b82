#!/usr/bin/env bash
# A headless Chromium for the report's browser tests, without root: prints the path of
# the browser to use on its last line of stdout (everything else goes to stderr).
#
#   1. $DOMINO_PROF_CHROMIUM, when it names a program that runs;
#   2. a Chromium on PATH (chromium, chromium-browser, google-chrome, chrome-headless-shell);
#   3. else Debian's chromium, unpacked once into a cache (no root, nothing installed):
#      apt-get download of the chromium package and of the libraries it needs that this
#      machine lacks (apt-get -s install lists them), unpacked with dpkg-deb -x under
#      ${DOMINO_PROF_CACHE:-${XDG_CACHE_HOME:-~/.cache}/domino-prof}/chromium-<version>/,
#      and a wrapper there that runs it with those libraries. apt reads its own package
#      lists there too (apt-get update into the cache), so it needs no root either.
#      About 125 MB of downloads and 400 MB on disk, once per Chromium version.
# Safe to re-run; a half-finished unpack is never taken for a finished one (it is
# unpacked into a temp directory and renamed into place).
set -euo pipefail

say() { echo "get_chromium: $*" >&2; }
runs() { "$1" --version >/dev/null 2>&1; }

if [ -n "${DOMINO_PROF_CHROMIUM:-}" ]; then
  if runs "$DOMINO_PROF_CHROMIUM"; then echo "$DOMINO_PROF_CHROMIUM"; exit 0; fi
  say "DOMINO_PROF_CHROMIUM=$DOMINO_PROF_CHROMIUM does not run ($DOMINO_PROF_CHROMIUM --version failed); unset it or point it at a Chromium"
  exit 1
fi
for name in chromium chromium-browser google-chrome chrome-headless-shell; do
  if p="$(command -v "$name")" && runs "$p"; then echo "$p"; exit 0; fi
done

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
  say "no Chromium on PATH and no apt-get/dpkg-deb to fetch Debian's; install a Chromium-family browser and set DOMINO_PROF_CHROMIUM=/path/to/it"
  exit 1
fi
cache="${DOMINO_PROF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/domino-prof}"
apt_dir="$cache/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial"
apt_opts=(-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir" -o Debug::NoLocking=1
          -o APT::Sandbox::User="$(id -un)")
# the package lists: refreshed when missing or older than a day
if [ -z "$(find "$apt_dir/lists" -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
  say "reading Debian's package lists into $apt_dir (apt-get update, no root)"
  apt-get "${apt_opts[@]}" -qq update >&2
fi
version="$(apt-cache "${apt_opts[@]}" policy chromium | awk '/Candidate:/ {print $2}')"
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  say "Debian's package lists here have no chromium; install a Chromium-family browser and set DOMINO_PROF_CHROMIUM=/path/to/it"
  exit 1
fi
dest="$cache/chromium-${version//[^A-Za-z0-9.+-]/_}"
wrapper="$dest/chromium"
if [ -x "$wrapper" ] && runs "$wrapper"; then echo "$wrapper"; exit 0; fi

# what `apt-get install chromium` would add to this machine: chromium and the libraries
# it lacks (the others are the machine's own)
mapfile -t pkgs < <(apt-get "${apt_opts[@]}" -s --no-install-recommends install chromium 2>/dev/null \
                    | awk '/^Inst /{print $2}')
say "no Chromium on PATH: fetching Debian's chromium $version, ${#pkgs[@]} packages with the libraries this machine lacks (${pkgs[*]}), by apt-get download (no root), and unpacking them into $dest"
work="$(mktemp -d "$cache/.chromium.XXXXXX")"
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get "${apt_opts[@]}" -qq download "${pkgs[@]}" >&2)
mkdir -p "$work/root"
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
rm -f "$work"/*.deb
libs="$(find "$work/root" -name '*.so*' -printf '%h\n' | sort -u | sed "s#^$work#$dest#" | paste -sd:)"
cat > "$work/chromium" <<EOF
#!/bin/sh
# Debian's chromium $version, unpacked by scripts/get_chromium.sh (no root)
LD_LIBRARY_PATH="$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$dest/root/usr/lib/chromium/chromium" "\$@"
EOF
chmod +x "$work/chromium"
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
if ! runs "$wrapper"; then
  say "the unpacked chromium does not start: $wrapper --version failed; install a Chromium-family browser and set DOMINO_PROF_CHROMIUM=/path/to/it"
  exit 1
fi
say "chromium ready: $wrapper ($(du -sh "$dest" | cut -f1))"
echo "$wrapper"

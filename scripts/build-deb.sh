#!/bin/bash
# Builds the Debian package target/debian/strata_<version>_<arch>.deb from
# the release binary (make deb builds it first), with dpkg-deb alone: no
# debhelper, no fakeroot (--root-owner-group makes every file root's).
#
#   scripts/build-deb.sh            # STRATA_PROD_BIN=... for another binary
#
# What goes in: /usr/bin/strata (stripped of its debug line tables: 31 MB
# -> a few; target/release keeps them for profiling), the unit
# /lib/systemd/system/strata.service, the commented configuration
# /etc/strata/strata.conf (a conffile: an upgrade keeps the operator's
# edits), docs/install.md, and a copyright file listing the crates the
# binary links statically. The maintainer scripts are dist/debian's.
set -euo pipefail

cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-target}
BIN=${STRATA_PROD_BIN:-$TARGET/release/strata}
OUT=$TARGET/debian
[ -x "$BIN" ] || { echo "build-deb: no $BIN (cargo build --release first)" >&2; exit 1; }
# Never the test build (cargo feature test-hooks, target/release/strata-test):
# it parses --debug-flash-writes before --version exits, a production build
# refuses it.
if "$BIN" --debug-flash-writes --version >/dev/null 2>&1; then
  echo "build-deb: $BIN has the test hooks (a test build); package a plain cargo build --release" >&2
  exit 1
fi

VERSION=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
ARCH=$(dpkg --print-architecture)
[ -n "$VERSION" ] || { echo "build-deb: no version in Cargo.toml" >&2; exit 1; }
STAGE=$OUT/strata_${VERSION}_${ARCH}
DEB=$OUT/strata_${VERSION}_${ARCH}.deb
rm -rf "$STAGE" "$DEB"
install -d -m 0755 "$STAGE"/DEBIAN "$STAGE"/usr/bin "$STAGE"/lib/systemd/system "$STAGE"/etc/strata \
  "$STAGE"/usr/share/doc/strata

# The debug line tables go (31 MB -> 5.0 MB); the symbol table stays (0.6
# MB more than --strip-all), so a panic's backtrace and perf still name
# functions.
strip --strip-debug --remove-section=.comment -o "$STAGE"/usr/bin/strata "$BIN"
chmod 0755 "$STAGE"/usr/bin/strata
install -m 0644 dist/debian/strata.service "$STAGE"/lib/systemd/system/strata.service
install -m 0644 dist/debian/strata.conf "$STAGE"/etc/strata/strata.conf
install -m 0644 docs/install.md "$STAGE"/usr/share/doc/strata/install.md
for s in postinst prerm postrm; do install -m 0755 dist/debian/$s "$STAGE"/DEBIAN/$s; done
echo /etc/strata/strata.conf >"$STAGE"/DEBIAN/conffiles

# The shared libraries it needs, at the versions its symbols need
# (libc6 >= 2.34 for the glibc symbols it uses; libgcc-s1 for unwinding):
# dpkg-shlibdeps reads them off the binary as debhelper would. It wants a
# debian/control beside it, hence the scratch directory.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch"/debian
printf 'Source: strata\n\nPackage: strata\nArchitecture: any\n' >"$scratch"/debian/control
bin_abs=$(realpath "$STAGE"/usr/bin/strata)
DEPENDS=$(cd "$scratch" && dpkg-shlibdeps -O "$bin_abs" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$DEPENDS" ] || { echo "build-deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

# The crates linked into the binary. cargo tree reads the manifest of every
# package Cargo.lock lists, dev-dependencies too, which a machine that only
# ran `cargo build --release` has not downloaded (`--offline` then fails:
# "failed to download aho-corasick"): offline if all are here, else cargo
# fetches the missing ones (crates.io, as the build itself needed).
tree() {
  cargo tree -p strata -e normal,no-proc-macro --target "$(rustc -vV | sed -n 's/^host: //p')" \
    --prefix none --format '{p}|{l}' --locked "$@"
}
tree --offline >"$scratch"/crates 2>/dev/null || tree >"$scratch"/crates

# The copyright file: strata's licence, then every crate linked into the
# binary (normal dependencies on Linux, less proc-macros, which run only
# at compile time) with its own licence, from Cargo.lock.
{
  cat <<'HEAD'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: strata
Comment: /usr/bin/strata links the Rust standard library (MIT or
 Apache-2.0) and the crates listed below statically; each is under the
 licence given for it, as its crates.io release declares.

Files: *
Copyright: the strata authors
License: BSD-3-Clause
 Redistribution and use in source and binary forms, with or without
 modification, are permitted provided that the following conditions are met:
 .
 1. Redistributions of source code must retain the above copyright notice,
    this list of conditions and the following disclaimer.
 2. Redistributions in binary form must reproduce the above copyright notice,
    this list of conditions and the following disclaimer in the documentation
    and/or other materials provided with the distribution.
 3. Neither the name of the copyright holder nor the names of its
    contributors may be used to endorse or promote products derived from
    this software without specific prior written permission.
 .
 THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"
 AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE
 IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE
 ARE DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE
 LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR
 CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF
 SUBSTITUTE GOODS OR SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS
 INTERRUPTION) HOWEVER CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN
 CONTRACT, STRICT LIABILITY, OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE)
 ARISING IN ANY WAY OUT OF THE USE OF THIS SOFTWARE, EVEN IF ADVISED OF THE
 POSSIBILITY OF SUCH DAMAGE.
HEAD
  # Normal dependencies only (no proc-macros or build dependencies, which
  # are not linked); path crates (strata's own, "(/path)") are strata's
  # licence above.
  grep -v ' (' "$scratch"/crates | sort -u |
    while IFS='|' read -r pkg licence; do
      printf '\nFiles: crate %s %s\nCopyright: its authors\nLicense: %s\n' \
        "${pkg%% v*}" "${pkg##* v}" "${licence:-see the crate}"
    done
} >"$STAGE"/usr/share/doc/strata/copyright
chmod 0644 "$STAGE"/usr/share/doc/strata/copyright

INSTALLED_KB=$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
cat >"$STAGE"/DEBIAN/control <<CONTROL
Package: strata
Version: $VERSION
Architecture: $ARCH
Maintainer: strata developers <strata@localhost>
Installed-Size: $INSTALLED_KB
Depends: $DEPENDS
Section: net
Priority: optional
Description: memcached-compatible cache server
 strata speaks memcached's text, meta and binary protocols and takes its
 command-line flags and configuration file format. It adds warm restarts
 (the cache saved at shutdown, loaded at start), an optional durability
 log and a flash tier for values beyond memory.
 .
 It installs beside Debian's memcached package (no file in common), but
 serves the same port: strata.service conflicts with memcached.service,
 so one of them runs at a time. The service is not started on install:
 systemctl enable --now strata.
CONTROL

# md5sums of everything but the conffile (dpkg tracks that one itself).
(cd "$STAGE" && find usr lib -type f -print0 | sort -z | xargs -0 md5sum) >"$STAGE"/DEBIAN/md5sums
chmod 0644 "$STAGE"/DEBIAN/control "$STAGE"/DEBIAN/conffiles "$STAGE"/DEBIAN/md5sums

dpkg-deb --root-owner-group -Zxz --build "$STAGE" "$DEB" >/dev/null
echo "build-deb: $DEB ($(du -k "$DEB" | cut -f1) KB; /usr/bin/strata $(($(stat -c %s "$STAGE"/usr/bin/strata) / 1024)) KB)"

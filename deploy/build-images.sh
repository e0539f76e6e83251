#!/usr/bin/env bash
# Builds an OCI image per daemon without a registry or a container engine:
#
#   deploy/build-images.sh [--debs DIR] [--out DIR] [--prefix NAME_PREFIX] [--rootfs DIR]
#
#   --debs    where cloudstream_*.deb and edgestream_*.deb are (default: build them with
#             deploy/build-packages.sh into build/packages, then build/packages/packages)
#   --out     where the images go (default build/images)
#   --prefix  image name prefix (default localhost/, the names the manifests use)
#   --rootfs  only assemble each image's file tree, as DIR/<daemon>/, without umoci (what the
#             Dockerfiles in deploy/ copy into a `FROM scratch` image)
#
# Each image is distroless-style: the daemon from its Debian package, and only the shared
# libraries `ldd` lists for it, copied from this (Debian 12) machine's installed packages, each
# package recorded in /var/lib/dpkg/status.d/ with its copyright file (what image scanners read);
# /etc/passwd, /etc/group (root, nonroot 65532) and /etc/nsswitch.conf. No shell, no package
# manager, no CA bundle (every peer is verified against a configured CA file). umoci (Debian's)
# assembles the OCI layout; file times and the created date come from SOURCE_DATE_EPOCH (default:
# the last commit's time), so the same inputs give the same digest.
#
# Output, per daemon D at version V (the package's upstream version):
#   OUT/D-V.oci.tar   the OCI layout as a tar, for `ctr -n k8s.io images import` or
#                     `skopeo copy oci-archive:OUT/D-V.oci.tar docker://REGISTRY/D:V`
#   OUT/oci/D/        the same layout unpacked (`umoci ls --layout OUT/oci/D`)
# The image is named PREFIX D:V (annotation io.containerd.image.name, which ctr reads).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
debs='' out=$src/build/images prefix=localhost/ rootfs_out=''
while [ $# -gt 0 ]; do
	case $1 in
	--debs) debs=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--prefix) prefix=$2; shift 2 ;;
	--rootfs) rootfs_out=$2; shift 2 ;;
	*) echo "usage: $0 [--debs DIR] [--out DIR] [--prefix NAME_PREFIX] [--rootfs DIR]" >&2; exit 2 ;;
	esac
done
tools="dpkg-deb ldd"
[ -n "$rootfs_out" ] || tools="$tools umoci"
for t in $tools; do
	command -v "$t" >/dev/null ||
		{ echo "build-images: $t missing (deploy/install-deps.sh)" >&2; exit 1; }
done
if [ -z "$debs" ]; then
	"$src/deploy/build-packages.sh" "$src/build/packages" >/dev/null
	debs=$src/build/packages/packages
fi
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git -C "$src" log -1 --format=%ct 2>/dev/null || echo 0)
fi
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
mkdir -p "$out"
out=$(cd "$out" && pwd)

# copy_path ROOT PATH: PATH (a file, or a chain of symlinks ending in one) into ROOT at the same
# place, links kept as links.
copy_path() {
	local root=$1 p=$2 t
	while [ -L "$p" ]; do
		t=$(readlink "$p")
		mkdir -p "$root$(dirname "$p")"
		ln -sfn "$t" "$root$p"
		case $t in /*) p=$t ;; *) p=$(dirname "$p")/$t ;; esac
	done
	mkdir -p "$root$(dirname "$p")"
	cp -p "$p" "$root$p"
}

# owner PATH: the installed package that holds PATH (dpkg knows /lib paths as shipped, before
# the /usr merge).
owners() {
	local p q
	for p in "$@"; do
		q=$(readlink -f "$p")
		printf '%s\n' "$p" "$q" "${q#/usr}"
	done | sort -u | { xargs dpkg-query -S 2>/dev/null || true; } |
		sed -n 's/^\([a-z0-9][a-z0-9+.-]*\)\(:[a-z0-9]*\)\?: \(.*\)$/\3 \1/p'
}

build_one() {
	local d=$1 user=$2 deb ver tag name work root pkgs p
	deb=$(find "$debs" -maxdepth 1 -name "${d}_*.deb" | sort -V | tail -1)
	[ -n "$deb" ] || { echo "build-images: no ${d}_*.deb in $debs" >&2; exit 1; }
	ver=$(dpkg-deb -f "$deb" Version)
	tag=${ver%-*}
	name=$prefix$d:$tag
	work=$out/work/$d
	rm -rf "$work" "$out/oci/$d"
	mkdir -p "$work/deb" "$work/rootfs"
	root=$work/rootfs
	dpkg-deb -x "$deb" "$work/deb"

	# Debian 12's merged /usr, so the loader and library paths are the usual ones.
	mkdir -p "$root"/usr/{bin,sbin,lib,lib64} "$root"/etc "$root"/var/lib/dpkg/status.d
	for l in bin sbin lib lib64; do ln -s usr/$l "$root/$l"; done
	install -d -m 1777 "$root/tmp"
	install -m 0755 "$work/deb/usr/bin/$d" "$root/usr/bin/$d"
	# cloudstream-ctl, for `kubectl exec ... -- cloudstream-ctl sessions` (its libraries are a
	# subset of cloudstream's).
	[ ! -x "$work/deb/usr/bin/$d-ctl" ] || install -m 0755 "$work/deb/usr/bin/$d-ctl" "$root/usr/bin/$d-ctl"
	mkdir -p "$root/usr/share/doc"
	cp -a "$work/deb/usr/share/doc/$d" "$root/usr/share/doc/"

	# The shared libraries, as ldd resolves them here, and who ships each.
	local libs owned
	# lws loads its libev plugin (stream/loop.h) with dlopen: ldd does not see it, so it and
	# what it links go in by name.
	local evlib
	evlib=$(dpkg -L libwebsockets-evlib-ev | grep '/libwebsockets-evlib_ev\.so$')
	libs=$({ ldd "$root/usr/bin/$d"; ldd "$evlib"; } |
		awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
	libs="$libs $evlib"
	# shellcheck disable=SC2086 # one path per word
	owned=$(owners $libs /etc/os-release)
	for p in $libs /etc/os-release; do
		copy_path "$root" "$p"
		q=$(readlink -f "$p")
		printf '%s\n' "$owned" | grep -qE "^($p|$q|${q#/usr}) " ||
			{ echo "build-images: no package owns $p" >&2; exit 1; }
	done
	pkgs=$(printf '%s\n' "$owned" | cut -d' ' -f2 | sort -u)
	for p in $pkgs; do
		dpkg-query -s "$p" | grep -v '^Conffiles:\|^ /' >"$root/var/lib/dpkg/status.d/$p"
		if [ -f "/usr/share/doc/$p/copyright" ]; then
			mkdir -p "$root/usr/share/doc/$p"
			cp -p "/usr/share/doc/$p/copyright" "$root/usr/share/doc/$p/copyright"
		fi
	done
	# Our own package, as dpkg would record it.
	{ dpkg-deb -f "$deb"; echo "Status: install ok installed"; } >"$root/var/lib/dpkg/status.d/$d"

	printf '%s\n' root:x:0:0:root:/root:/sbin/nologin \
		nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin >"$root/etc/passwd"
	printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
	printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
	chown -R 0:0 "$root"
	find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
	if [ -n "$rootfs_out" ]; then
		mkdir -p "$rootfs_out"
		rm -rf "${rootfs_out:?}/$d"
		mv "$root" "$rootfs_out/$d"
		rm -rf "$work"
		printf '%s\t%s\n' "$d" "$rootfs_out/$d"
		return
	fi

	# The OCI layout: an empty image, the rootfs as its one layer (unpack + repack: Debian's
	# umoci 0.4.7 `insert` writes layers without the tar end blocks, umoci#436), then the
	# configuration.
	local layout=$out/oci/$d
	umoci init --layout "$layout"
	umoci new --image "$layout:$tag"
	umoci unpack --image "$layout:$tag" "$work/bundle" >/dev/null
	cp -a "$root/." "$work/bundle/rootfs/"
	touch -h -d "@$SOURCE_DATE_EPOCH" "$work/bundle/rootfs"
	umoci repack --image "$layout:$tag" --history.created "$created" \
		--history.created_by "deploy/build-images.sh: $d $ver and its shared libraries" \
		"$work/bundle"
	umoci config --image "$layout:$tag" --created "$created" --no-history \
		--author "$(dpkg-deb -f "$deb" Maintainer)" --architecture "$(dpkg-deb -f "$deb" Architecture)" \
		--os linux --config.user "$user" --config.workingdir / \
		--config.env PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		--config.entrypoint "/usr/bin/$d" --config.stopsignal SIGTERM \
		--config.label "org.opencontainers.image.title=$d" \
		--config.label "org.opencontainers.image.version=$tag" \
		--config.label "org.opencontainers.image.description=$(dpkg-deb -f "$deb" Description | head -1)"
	umoci gc --layout "$layout"
	# The name containerd gives the image on import (it reads io.containerd.image.name, else
	# needs a full reference in org.opencontainers.image.ref.name, which umoci keeps as the tag).
	python3 - "$layout/index.json" "$name" <<'PY'
import json, sys
path, name = sys.argv[1:]
idx = json.load(open(path))
for m in idx["manifests"]:
    m.setdefault("annotations", {})["io.containerd.image.name"] = name
json.dump(idx, open(path, "w"), separators=(",", ":"))
PY
	find "$layout" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
	tar -C "$layout" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 \
		--numeric-owner -cf "$out/$d-$tag.oci.tar" oci-layout index.json blobs
	printf '%s\t%s\t%s bytes, %s bytes unpacked, %d packages\n' "$name" "$out/$d-$tag.oci.tar" \
		"$(stat -c %s "$out/$d-$tag.oci.tar")" "$(du -sb "$root" | cut -f1)" \
		"$(($(echo "$pkgs" | wc -w) + 1))"
	rm -rf "$work"
}

build_one cloudstream 65532:65532
build_one edgestream 0:0
rmdir "$out/work" 2>/dev/null || true

#!/usr/bin/env bash
# Builds the Soft-RoCE guest the interop tests boot: Debian's 6.1 kernel
# with rdma_rxe, rdma-core's and perftest's tools, busybox, and our /init,
# as a kernel and an initramfs in $OUT (default /var/tmp/vroce-rxe-guest).
# Everything comes from Debian's packages (apt-get download); only $OUT is
# written. A second run reuses what the first downloaded.
#
# Needs: apt-get, dpkg, cpio, gzip, depmod (kmod), busybox-static, ldd.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/var/tmp/vroce-rxe-guest}
# The kernel: what linux-image-amd64 depends on, unless KVER pins one
# (any 6.1 amd64 flavour that ships rdma_rxe.ko).
latest_kernel() { apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: linux-image-\(6\.1\.[0-9.-]*-amd64\)$/\1/p' | head -1; }
kver=${KVER:-$(latest_kernel)}
if [ -z "$kver" ]; then # a machine whose package lists were never fetched
  apt-get update -qq
  kver=$(latest_kernel)
fi
[ -n "$kver" ] || { echo "build.sh: apt knows no linux-image-6.1 amd64 package" >&2; exit 1; }

packages=(
  "linux-image-$kver"
  libibverbs1 ibverbs-providers ibverbs-utils librdmacm1 rdmacm-utils
  perftest libpci3 libibumad3 libnl-3-200 libnl-route-3-200 iproute2
)
tools=(ibv_devinfo ibv_rc_pingpong ibv_ud_pingpong ibv_srq_pingpong rping udaddy ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw ib_send_lat ib_write_lat ib_read_lat ib_atomic_lat rdma)
modules=(crc32_generic virtio_pci virtio_net rdma_rxe rdma_ucm)

if ldd /bin/busybox >/dev/null 2>&1; then
  echo "build.sh: /bin/busybox is dynamically linked; the guest needs busybox-static" >&2
  exit 1
fi

mkdir -p "$out/debs"
(cd "$out/debs" && for p in "${packages[@]}"; do
  ls "${p}"_*.deb >/dev/null 2>&1 || apt-get download -q "$p"
done)

x=$out/extract root=$out/root
rm -rf "$x" "$root"
mkdir -p "$x"
for d in "$out"/debs/*.deb; do dpkg -x "$d" "$x"; done
depmod -b "$x" "$kver"

mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,etc,root,lib64,var/run}
mkdir -p "$root/lib/x86_64-linux-gnu" "$root/usr/lib/x86_64-linux-gnu/libibverbs" "$root/etc/libibverbs.d" "$root/lib/modules/$kver"
cp /bin/busybox "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
for t in "${tools[@]}"; do
  f=$(find "$x/usr/bin" "$x/bin" "$x/sbin" "$x/usr/sbin" -maxdepth 1 -name "$t" 2>/dev/null | head -1)
  [ -n "$f" ] || { echo "build.sh: $t is in none of the packages" >&2; exit 1; }
  cp "$f" "$root/usr/bin/$t"
done
cp "$x"/usr/lib/x86_64-linux-gnu/libibverbs/librxe-*.so "$root/usr/lib/x86_64-linux-gnu/libibverbs/"
cp "$x/etc/libibverbs.d/rxe.driver" "$root/etc/libibverbs.d/"

# The shared libraries every tool needs, from the packages first, then
# from this machine (glibc and friends); libgcc_s is loaded by glibc at
# pthread_exit, which ldd does not show.
libpath="$x/usr/lib/x86_64-linux-gnu:$x/lib/x86_64-linux-gnu"
declare -A copied=()
copy_libs() {
  local lib
  while read -r lib; do
    [ -f "$lib" ] && [ -z "${copied[$lib]:-}" ] || continue
    copied[$lib]=1
    case "$lib" in
      */ld-linux-x86-64.so.2) cp -L "$lib" "$root/lib64/" ;;
      "$x"/*) cp -L "$lib" "$root/usr/lib/x86_64-linux-gnu/" ;;
      *) cp -L "$lib" "$root/lib/x86_64-linux-gnu/" ;;
    esac
  done < <(LD_LIBRARY_PATH=$libpath ldd "$1" 2>/dev/null | awk '/=>/ {print $3; next} /^\t\// {print $1}')
}
for pass in 1 2; do
  for f in "$root"/usr/bin/* "$root"/usr/lib/x86_64-linux-gnu/libibverbs/*.so "$root"/usr/lib/x86_64-linux-gnu/*.so* "$root"/lib/x86_64-linux-gnu/*.so*; do
    [ -f "$f" ] && [ ! -L "$f" ] && copy_libs "$f"
  done
done
cp -L /lib/x86_64-linux-gnu/libgcc_s.so.1 "$root/lib/x86_64-linux-gnu/"
[ -f "$root/lib64/ld-linux-x86-64.so.2" ] || cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
if LD_LIBRARY_PATH=$libpath ldd "$root"/usr/bin/* 2>&1 | grep -q 'not found'; then
  echo "build.sh: unresolved shared libraries:" >&2
  LD_LIBRARY_PATH=$libpath ldd "$root"/usr/bin/* 2>&1 | grep -E '^/|not found' >&2
  exit 1
fi
printf '/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n' > "$root/etc/ld.so.conf"

# The kernel modules and everything they depend on, in load order
# (modules.dep lists a module's dependencies last-loaded-first).
md=$x/lib/modules/$kver
declare -A loaded=()
order=()
add_module() {
  local rel=$1 deps i
  [ -z "${loaded[$rel]:-}" ] || return 0
  loaded[$rel]=1
  read -r -a deps <<<"$(awk -v m="$rel:" '$1 == m {for (i = 2; i <= NF; i++) print $i}' "$md/modules.dep" | tr '\n' ' ')"
  for ((i = ${#deps[@]} - 1; i >= 0; i--)); do add_module "${deps[$i]}"; done
  order+=("$rel")
}
for m in "${modules[@]}"; do
  rel=$(awk -F: -v n="/$m.ko" 'substr($1, length($1) - length(n) + 1) == n {print $1}' "$md/modules.dep" | head -1)
  [ -n "$rel" ] || { echo "build.sh: module $m is not in $kver" >&2; exit 1; }
  add_module "$rel"
done
: > "$root/etc/modules"
for rel in "${order[@]}"; do
  cp "$md/$rel" "$root/lib/modules/$kver/"
  basename "$rel" >> "$root/etc/modules"
done
echo "$kver" > "$root/etc/kver"

install -m 755 "$here/init" "$root/init"
install -m 755 "$here/run-one" "$root/bin/run-one"
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$root/etc/passwd"
printf 'root:x:0:\n' > "$root/etc/group"

cp "$x/boot/vmlinuz-$kver" "$out/vmlinuz.new" && mv -f "$out/vmlinuz.new" "$out/vmlinuz"
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 > "$out/initramfs.new"
mv -f "$out/initramfs.new" "$out/initramfs.cpio.gz"
rm -rf "$x" "$root"
echo "$kver" > "$out/kver"
echo "build.sh: $out/vmlinuz and $out/initramfs.cpio.gz ($kver)"

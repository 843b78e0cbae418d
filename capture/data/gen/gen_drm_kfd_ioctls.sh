#!/bin/sh
# Regenerate drm-kfd-ioctls.tsv: the Linux DRM core ioctls (drm/drm.h), the driver ioctls of amdgpu
# (drm/amdgpu_drm.h), i915 (drm/i915_drm.h) and xe (drm/xe_drm.h), and the AMD KFD ioctls
# (linux/kfd_ioctl.h), as request words.
#
# Usage: sh capture/data/gen/gen_drm_kfd_ioctls.sh INCLUDE_DIR "VERSION" "SOURCE_URL" > capture/data/drm-kfd-ioctls.tsv
#   INCLUDE_DIR: a copy of the kernel's exported UAPI headers (the layout of `make headers_install` or a
#   distribution's linux-libc-dev /usr/include: INCLUDE_DIR/drm/*.h, INCLUDE_DIR/linux/kfd_ioctl.h).
#   The headers are read, never copied into the repository.
#
# Names are every macro of each header whose body is DRM_IO*/AMDKFD_IO* (gcc -dM), a driver header's
# set minus drm.h's; words are computed by compiling them with gcc, so struct sizes are the header's own.
# x86_64 and aarch64 share asm-generic/ioctl.h and LP64 layouts: the words are valid on both.
set -eu
inc=${1:?usage: gen_drm_kfd_ioctls.sh INCLUDE_DIR VERSION SOURCE_URL}
version=${2:?version label, e.g. "Linux 6.12.117 (Debian linux-libc-dev 6.12.117-1)"}
source_url=${3:?source URL of the headers}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
arch_inc="$inc/$(gcc -dumpmachine)"
cc_flags="-I$inc"
[ -d "$arch_inc" ] && cc_flags="$cc_flags -I$arch_inc"

# Macro names of HEADER whose body is an ioctl encoding.
ioctl_macros() {
  printf '#include <%s>\n' "$1" | gcc $cc_flags -dM -E -x c - |
    awk '$1 == "#define" && ($3 ~ /^(DRM_IO|AMDKFD_IO)/) { print $2 }' | sort -u
}

ioctl_macros drm/drm.h > "$tmp/drm"
{
  echo '#include <stdio.h>'
  for h in drm/drm.h drm/amdgpu_drm.h drm/i915_drm.h drm/xe_drm.h linux/kfd_ioctl.h; do
    echo "#include <$h>"
  done
  # printf %s: dash's echo would turn the C string's backslash escapes into real tabs and newlines.
  printf '%s\n' '#define R(name, drv) printf("0x%08x\t%s\t%s\t0x%02x\n", (unsigned)(name), #name, drv, (unsigned)(name) & 0xff)'
  echo 'int main(void) {'
  sed 's/.*/  R(&, "drm");/' "$tmp/drm"
  for pair in amdgpu:drm/amdgpu_drm.h i915:drm/i915_drm.h xe:drm/xe_drm.h amdkfd:linux/kfd_ioctl.h; do
    drv=${pair%%:*}
    ioctl_macros "${pair#*:}" | comm -23 - "$tmp/drm" | sed "s/.*/  R(&, \"$drv\");/"
  done
  echo '  return 0;'
  echo '}'
} > "$tmp/gen.c"
gcc $cc_flags -o "$tmp/gen" "$tmp/gen.c"
echo "# DRM and AMD KFD ioctl request words, computed by capture/data/gen/gen_drm_kfd_ioctls.sh with gcc $(gcc -dumpversion) on $(uname -m) from the UAPI headers of $version: drm/drm.h (+drm_mode.h), drm/amdgpu_drm.h, drm/i915_drm.h, drm/xe_drm.h, linux/kfd_ioctl.h; source: $source_url. Same words on aarch64 (asm-generic ioctl encoding, LP64). DRM driver ioctls are type 'd' with nr in [0x40, 0xa0) (DRM_COMMAND_BASE..DRM_COMMAND_END), one table per driver; KFD ioctls are type 'K' on /dev/kfd."
printf '# request\tname\tdriver\tnr\tnote\n'
# What a name alone does not say (hand-written, from the drivers' ioctl handlers): which calls wait for the GPU.
cat > "$tmp/notes" <<'NOTES'
DRM_IOCTL_VERSION	driver name/version
DRM_IOCTL_PRIME_HANDLE_TO_FD	export a GEM handle as a dma-buf fd
DRM_IOCTL_PRIME_FD_TO_HANDLE	import a dma-buf fd
DRM_IOCTL_SYNCOBJ_WAIT	waits for GPU fences
DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT	waits for GPU timeline points
DRM_IOCTL_MODE_GETRESOURCES	KMS
DRM_IOCTL_MODE_CREATE_DUMB	KMS dumb buffer
DRM_IOCTL_MODE_MAP_DUMB	KMS dumb buffer
DRM_IOCTL_MODE_DESTROY_DUMB	KMS dumb buffer
DRM_IOCTL_MODE_ATOMIC	KMS atomic commit
DRM_IOCTL_AMDGPU_CS	command submission (locks the BOs' dma_resv, syncs to their fences)
DRM_IOCTL_AMDGPU_WAIT_CS	waits for a submission's fence
DRM_IOCTL_AMDGPU_WAIT_FENCES	waits for GPU fences
DRM_IOCTL_AMDGPU_GEM_WAIT_IDLE	waits until the BO is idle (its fences)
DRM_IOCTL_I915_GEM_EXECBUFFER2	command submission
DRM_IOCTL_I915_GEM_EXECBUFFER2_WR	command submission (returns an out-fence)
DRM_IOCTL_I915_GEM_WAIT	waits for a BO's GPU work
DRM_IOCTL_XE_EXEC	command submission
DRM_IOCTL_XE_WAIT_USER_FENCE	waits for a user fence
AMDKFD_IOC_WAIT_EVENTS	waits for KFD events (signals, memory exceptions)
AMDKFD_IOC_ALLOC_MEMORY_OF_GPU	allocates VRAM/GTT/userptr memory for the process's GPU VM
AMDKFD_IOC_MAP_MEMORY_TO_GPU	maps a BO into GPU VMs (waits for the page-table update)
AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU	unmaps a BO from GPU VMs (waits for the page-table update, flushes TLBs)
NOTES
"$tmp/gen" | awk -F '\t' -v OFS='\t' 'NR == FNR { note[$1] = $2; next } { print $0, ($2 in note) ? note[$2] : "" }' "$tmp/notes" -

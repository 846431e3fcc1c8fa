package squash

import (
	"path"
	"strings"
)

// ReasonNodeBound is why a driver's user-space library is recorded, not bundled.
const ReasonNodeBound = "node-bound: the user-space half of a kernel driver, which must match the node's module (loaded from the node at run time; --include PATH to bundle it anyway)"

// nodeBoundNames are the file-name prefixes of libraries that are the
// user-space half of a kernel driver: their version must match the module
// loaded in the node's kernel (an ioctl ABI private to one driver release),
// so a copy frozen at build time breaks at the node's next driver update.
// Containers bind the same set from the host for that reason
// (nvidia-container-cli, libnvidia-container's list). docs/squash.md,
// "Node-bound libraries", gives the list with its reasons. The shim's C
// table reader keeps the same list (loader/shim/table.h, dlb_node_bound):
// names a newer driver adds are passed through to the node there.
var nodeBoundNames = []string{
	// NVIDIA: CUDA driver API, its debugger and JIT halves, the other
	// user-space libraries of the same driver package (libnvidia-ml,
	// -ptxjitcompiler, -nvvm, -gpucomp, -opencl, -encode, -fbc, -cfg,
	// -glcore, -tls, -rtcore, -eglcore, -glsi, -allocator, -api...).
	"libcuda.so", "libcudadebugger.so", "libnvidia-", "libnvcuvid.so", "libnvoptix.so",
	// NVIDIA's GL vendor libraries (glvnd dispatches to them by name).
	"libGLX_nvidia.so", "libEGL_nvidia.so", "libGLESv2_nvidia.so", "libGLESv1_CM_nvidia.so",
	"libvdpau_nvidia.so",
	// Not here: user-space halves of upstream kernel drivers (libdrm_amdgpu
	// and ROCm's libhsakmt for amdgpu/amdkfd, rdma-core's providers for the
	// ib_* modules, libcxi for Slingshot): the kernel keeps their ioctl
	// interface stable across releases, so a bundled copy keeps working
	// after a kernel update, and the app's runtime may depend on its exact
	// version. NVIDIA's driver alone requires the library and the module
	// of one release.
}

// NodeBound reports whether the file p names is the user-space half of a
// kernel driver (by its base name).
func NodeBound(p string) bool {
	name := path.Base(p)
	for _, prefix := range nodeBoundNames {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// NodeBoundNames returns the prefixes, for the documentation's check.
func NodeBoundNames() []string { return append([]string(nil), nodeBoundNames...) }

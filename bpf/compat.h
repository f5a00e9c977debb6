/* Memory-read helpers chosen for the running kernel, by -D only (npu_trace.bpf.kernel picks the variant from the
 * helpers the kernel has; `npu-trace bpf --compat 4.14` forces the old one):
 *   default           bpf_probe_read_user, bpf_probe_read_kernel, bpf_probe_read_kernel_str (kernel 5.5 and later)
 *   NPU_LEGACY_READ   bpf_probe_read, bpf_probe_read_str: the only ones before 5.5 (CentOS 7.6's 4.14, Kylin V10's
 *                     and EulerOS 2.x's 4.19); they read user and kernel memory alike by address on x86-64 and
 *                     arm64, the architectures whose address spaces do not overlap
 * The other things a 4.x kernel lacks need no variant here: every loop of these programs has a constant bound and
 * is unrolled (no bounded-loop support needed, 5.3), every program stays under the 4096 instructions 4.x verifies
 * (tests/test_bpf_compat.py counts them), bcc needs no BTF, and the perf event array replaces the BPF ring buffer
 * (USE_PERF_BUFFER, output.h).
 */
#ifndef NPU_COMPAT_H
#define NPU_COMPAT_H

#ifdef NPU_LEGACY_READ
#define npu_read_user(dst, size, src) bpf_probe_read(dst, size, src)
#define npu_read_kernel(dst, size, src) bpf_probe_read(dst, size, src)
#define npu_read_kernel_str(dst, size, src) bpf_probe_read_str(dst, size, src)
#else
#define npu_read_user(dst, size, src) bpf_probe_read_user(dst, size, src)
#define npu_read_kernel(dst, size, src) bpf_probe_read_kernel(dst, size, src)
#define npu_read_kernel_str(dst, size, src) bpf_probe_read_kernel_str(dst, size, src)
#endif

#endif

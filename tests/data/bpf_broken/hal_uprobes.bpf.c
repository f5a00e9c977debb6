/* A deliberately broken BPF program: doctor's compile check must say that bcc cannot compile it. */
int broken(struct pt_regs *ctx)
{
	return undeclared_identifier + ;
}

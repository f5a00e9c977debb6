"""The format files of the kernel events npu-trace knows without being told: what an ftrace text import
(`npu_trace.sources.ftrace_text`) writes its events with when the text does not come with its own formats.

`KERNEL`: Linux 6.18.44 (x86-64) tracefs `events/<system>/<name>/format`, as the kernel printed them: the
scheduler's switch, wakeups, fork/exit/exec and migration, the interrupt and softirq events, task creation and
renaming, signals, ftrace's `print` (trace_marker), and the CPU idle and frequency events. `OLDER`: the same
events as a 3.x/4.x kernel printed them (before 4.14: `prev_state` flags `S D T t Z X x K W P` and preemption as
1024, wakeups with a `success` field, a process's exit without `group_dead`), from the trace.dat of ARM's trappy
tests (tests/trace.dat, github.com/ARM-software/trappy), their `char comm[32]` of 16 bytes written `comm[16]`
(the size the records have). A text whose lines fit neither is read through the other: the import chooses, per
event, the format that reads most of its lines.
"""

from __future__ import annotations

from typing import Tuple

_SCHED_SCHED_SWITCH = (
    "name: sched_switch\n"
    "ID: 372\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n"
    "\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n"
    "\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n"
    "\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n"
    "\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n"
    "\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n"
    "\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n"
    "\n"
    "print fmt: \"prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_"
    "prio=%d\", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | 0x00000"
    "001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1)) "
    "? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008"
    " | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1), \"|\", { 0x00000001, \"S\" }, { 0x00000002, \"D"
    "\" }, { 0x00000004, \"T\" }, { 0x00000008, \"t\" }, { 0x00000010, \"X\" }, { 0x00000020, \"Z\" }, { 0x0000004"
    "0, \"P\" }, { 0x00000080, \"I\" }) : \"R\", REC->prev_state & (((0x00000000 | 0x00000001 | 0x00000002 | 0x"
    "00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? \"+\" : \"\", REC->next_comm,"
    " REC->next_pid, REC->next_prio\n"
)

_SCHED_SCHED_WAKEUP = (
    "name: sched_wakeup\n"
    "ID: 374\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n"
    "\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n"
    "\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n"
    "\tfield:int target_cpu;\toffset:32;\tsize:4;\tsigned:1;\n"
    "\n"
    "print fmt: \"comm=%s pid=%d prio=%d target_cpu=%03d\", REC->comm, REC->pid, REC->prio, REC->target_cpu"
    "\n"
)

_SCHED_SCHED_WAKEUP_NEW = (
    "name: sched_wakeup_new\n"
    "ID: 373\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n"
    "\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n"
    "\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n"
    "\tfield:int target_cpu;\toffset:32;\tsize:4;\tsigned:1;\n"
    "\n"
    "print fmt: \"comm=%s pid=%d prio=%d target_cpu=%03d\", REC->comm, REC->pid, REC->prio, REC->target_cpu"
    "\n"
)

_SCHED_SCHED_WAKING = (
    "name: sched_waking\n"
    "ID: 375\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n"
    "\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n"
    "\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n"
    "\tfield:int target_cpu;\toffset:32;\tsize:4;\tsigned:1;\n"
    "\n"
    "print fmt: \"comm=%s pid=%d prio=%d target_cpu=%03d\", REC->comm, REC->pid, REC->prio, REC->target_cpu"
    "\n"
)

_SCHED_SCHED_PROCESS_FORK = (
    "name: sched_process_fork\n"
    "ID: 366\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\tfield:pid_t parent_pid;\toffset:12;\tsize:4;\tsigned:1;\n"
    "\tfield:__data_loc char[] child_comm;\toffset:16;\tsize:4;\tsigned:0;\n"
    "\tfield:pid_t child_pid;\toffset:20;\tsize:4;\tsigned:1;\n"
    "\n"
    "print fmt: \"comm=%s pid=%d child_comm=%s child_pid=%d\", __get_str(parent_comm), REC->parent_pid, __g"
    "et_str(child_comm), REC->child_pid\n"
)

_SCHED_SCHED_PROCESS_EXIT = (
    "name: sched_process_exit\n"
    "ID: 369\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n"
    "\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n"
    "\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n"
    "\tfield:bool group_dead;\toffset:32;\tsize:1;\tsigned:0;\n"
    "\n"
    "print fmt: \"comm=%s pid=%d prio=%d group_dead=%s\", REC->comm, REC->pid, REC->prio, REC->group_dead ?"
    " \"true\" : \"false\"\n"
)

_SCHED_SCHED_PROCESS_EXEC = (
    "name: sched_process_exec\n"
    "ID: 365\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;\n"
    "\tfield:pid_t old_pid;\toffset:16;\tsize:4;\tsigned:1;\n"
    "\n"
    "print fmt: \"filename=%s pid=%d old_pid=%d\", __get_str(filename), REC->pid, REC->old_pid\n"
)

_SCHED_SCHED_MIGRATE_TASK = (
    "name: sched_migrate_task\n"
    "ID: 371\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:__data_loc char[] comm;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;\n"
    "\tfield:int prio;\toffset:16;\tsize:4;\tsigned:1;\n"
    "\tfield:int orig_cpu;\toffset:20;\tsize:4;\tsigned:1;\n"
    "\tfield:int dest_cpu;\toffset:24;\tsize:4;\tsigned:1;\n"
    "\n"
    "print fmt: \"comm=%s pid=%d prio=%d orig_cpu=%d dest_cpu=%d\", __get_str(comm), REC->pid, REC->prio, R"
    "EC->orig_cpu, REC->dest_cpu\n"
)

_IRQ_IRQ_HANDLER_ENTRY = (
    "name: irq_handler_entry\n"
    "ID: 225\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n"
    "\tfield:__data_loc char[] name;\toffset:12;\tsize:4;\tsigned:0;\n"
    "\n"
    "print fmt: \"irq=%d name=%s\", REC->irq, __get_str(name)\n"
)

_IRQ_IRQ_HANDLER_EXIT = (
    "name: irq_handler_exit\n"
    "ID: 224\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n"
    "\tfield:int ret;\toffset:12;\tsize:4;\tsigned:1;\n"
    "\n"
    "print fmt: \"irq=%d ret=%s\", REC->irq, REC->ret ? \"handled\" : \"unhandled\"\n"
)

_IRQ_SOFTIRQ_ENTRY = (
    "name: softirq_entry\n"
    "ID: 223\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:unsigned int vec;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\n"
    "print fmt: \"vec=%u [action=%s]\", REC->vec, __print_symbolic(REC->vec, { 0, \"HI\" }, { 1, \"TIMER\" }, {"
    " 2, \"NET_TX\" }, { 3, \"NET_RX\" }, { 4, \"BLOCK\" }, { 5, \"IRQ_POLL\" }, { 6, \"TASKLET\" }, { 7, \"SCHED\" }"
    ", { 8, \"HRTIMER\" }, { 9, \"RCU\" })\n"
)

_IRQ_SOFTIRQ_EXIT = (
    "name: softirq_exit\n"
    "ID: 222\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:unsigned int vec;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\n"
    "print fmt: \"vec=%u [action=%s]\", REC->vec, __print_symbolic(REC->vec, { 0, \"HI\" }, { 1, \"TIMER\" }, {"
    " 2, \"NET_TX\" }, { 3, \"NET_RX\" }, { 4, \"BLOCK\" }, { 5, \"IRQ_POLL\" }, { 6, \"TASKLET\" }, { 7, \"SCHED\" }"
    ", { 8, \"HRTIMER\" }, { 9, \"RCU\" })\n"
)

_IRQ_SOFTIRQ_RAISE = (
    "name: softirq_raise\n"
    "ID: 221\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:unsigned int vec;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\n"
    "print fmt: \"vec=%u [action=%s]\", REC->vec, __print_symbolic(REC->vec, { 0, \"HI\" }, { 1, \"TIMER\" }, {"
    " 2, \"NET_TX\" }, { 3, \"NET_RX\" }, { 4, \"BLOCK\" }, { 5, \"IRQ_POLL\" }, { 6, \"TASKLET\" }, { 7, \"SCHED\" }"
    ", { 8, \"HRTIMER\" }, { 9, \"RCU\" })\n"
)

_TASK_TASK_NEWTASK = (
    "name: task_newtask\n"
    "ID: 205\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:pid_t pid;\toffset:8;\tsize:4;\tsigned:1;\n"
    "\tfield:char comm[16];\toffset:12;\tsize:16;\tsigned:0;\n"
    "\tfield:u64 clone_flags;\toffset:32;\tsize:8;\tsigned:0;\n"
    "\tfield:short oom_score_adj;\toffset:40;\tsize:2;\tsigned:1;\n"
    "\n"
    "print fmt: \"pid=%d comm=%s clone_flags=%llx oom_score_adj=%hd\", REC->pid, REC->comm, REC->clone_flag"
    "s, REC->oom_score_adj\n"
)

_TASK_TASK_RENAME = (
    "name: task_rename\n"
    "ID: 204\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:pid_t pid;\toffset:8;\tsize:4;\tsigned:1;\n"
    "\tfield:char oldcomm[16];\toffset:12;\tsize:16;\tsigned:0;\n"
    "\tfield:char newcomm[16];\toffset:28;\tsize:16;\tsigned:0;\n"
    "\tfield:short oom_score_adj;\toffset:44;\tsize:2;\tsigned:1;\n"
    "\n"
    "print fmt: \"pid=%d oldcomm=%s newcomm=%s oom_score_adj=%hd\", REC->pid, REC->oldcomm, REC->newcomm, R"
    "EC->oom_score_adj\n"
)

_SIGNAL_SIGNAL_GENERATE = (
    "name: signal_generate\n"
    "ID: 261\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:int sig;\toffset:8;\tsize:4;\tsigned:1;\n"
    "\tfield:int errno;\toffset:12;\tsize:4;\tsigned:1;\n"
    "\tfield:int code;\toffset:16;\tsize:4;\tsigned:1;\n"
    "\tfield:char comm[16];\toffset:20;\tsize:16;\tsigned:0;\n"
    "\tfield:pid_t pid;\toffset:36;\tsize:4;\tsigned:1;\n"
    "\tfield:int group;\toffset:40;\tsize:4;\tsigned:1;\n"
    "\tfield:int result;\toffset:44;\tsize:4;\tsigned:1;\n"
    "\n"
    "print fmt: \"sig=%d errno=%d code=%d comm=%s pid=%d grp=%d res=%d\", REC->sig, REC->errno, REC->code, "
    "REC->comm, REC->pid, REC->group, REC->result\n"
)

_SIGNAL_SIGNAL_DELIVER = (
    "name: signal_deliver\n"
    "ID: 260\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:int sig;\toffset:8;\tsize:4;\tsigned:1;\n"
    "\tfield:int errno;\toffset:12;\tsize:4;\tsigned:1;\n"
    "\tfield:int code;\toffset:16;\tsize:4;\tsigned:1;\n"
    "\tfield:unsigned long sa_handler;\toffset:24;\tsize:8;\tsigned:0;\n"
    "\tfield:unsigned long sa_flags;\toffset:32;\tsize:8;\tsigned:0;\n"
    "\n"
    "print fmt: \"sig=%d errno=%d code=%d sa_handler=%lx sa_flags=%lx\", REC->sig, REC->errno, REC->code, R"
    "EC->sa_handler, REC->sa_flags\n"
)

_FTRACE_PRINT = (
    "name: print\n"
    "ID: 5\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:unsigned long ip;\toffset:8;\tsize:8;\tsigned:0;\n"
    "\tfield:char buf[];\toffset:16;\tsize:0;\tsigned:0;\n"
    "\n"
    "print fmt: \"%ps: %s\", (void *)REC->ip, REC->buf\n"
)

_OLD_SCHED_SWITCH = (
    "name: sched_switch\n"
    "ID: 68\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n"
    "\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n"
    "\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n"
    "\tfield:long prev_state;\toffset:32;\tsize:4;\tsigned:1;\n"
    "\tfield:char next_comm[16];\toffset:36;\tsize:16;\tsigned:0;\n"
    "\tfield:pid_t next_pid;\toffset:52;\tsize:4;\tsigned:1;\n"
    "\tfield:int next_prio;\toffset:56;\tsize:4;\tsigned:1;\n"
    "\n"
    "print fmt: \"prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_"
    "prio=%d\", REC->prev_comm, REC->prev_pid, REC->prev_prio, REC->prev_state & (1024-1) ? __print_flags("
    "REC->prev_state & (1024-1), \"|\", { 1, \"S\"} , { 2, \"D\" }, { 4, \"T\" }, { 8, \"t\" }, { 16, \"Z\" }, { 32, "
    "\"X\" }, { 64, \"x\" }, { 128, \"K\" }, { 256, \"W\" }, { 512, \"P\" }) : \"R\", REC->prev_state & 1024 ? \"+\" : "
    "\"\", REC->next_comm, REC->next_pid, REC->next_prio\n"
)

_OLD_SCHED_WAKEUP = (
    "name: sched_wakeup\n"
    "ID: 70\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n"
    "\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n"
    "\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n"
    "\tfield:int success;\toffset:32;\tsize:4;\tsigned:1;\n"
    "\tfield:int target_cpu;\toffset:36;\tsize:4;\tsigned:1;\n"
    "\n"
    "print fmt: \"comm=%s pid=%d prio=%d success=%d target_cpu=%03d\", REC->comm, REC->pid, REC->prio, REC-"
    ">success, REC->target_cpu\n"
)

_OLD_SCHED_WAKEUP_NEW = (
    "name: sched_wakeup_new\n"
    "ID: 69\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n"
    "\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n"
    "\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n"
    "\tfield:int success;\toffset:32;\tsize:4;\tsigned:1;\n"
    "\tfield:int target_cpu;\toffset:36;\tsize:4;\tsigned:1;\n"
    "\n"
    "print fmt: \"comm=%s pid=%d prio=%d success=%d target_cpu=%03d\", REC->comm, REC->pid, REC->prio, REC-"
    ">success, REC->target_cpu\n"
)

_POWER_CPU_IDLE = (
    "name: cpu_idle\n"
    "ID: 568\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:u32 state;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\tfield:u32 cpu_id;\toffset:12;\tsize:4;\tsigned:0;\n"
    "\n"
    "print fmt: \"state=%lu cpu_id=%lu\", (unsigned long)REC->state, (unsigned long)REC->cpu_id\n"
)

_POWER_CPU_FREQUENCY = (
    "name: cpu_frequency\n"
    "ID: 565\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:u32 state;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\tfield:u32 cpu_id;\toffset:12;\tsize:4;\tsigned:0;\n"
    "\n"
    "print fmt: \"state=%lu cpu_id=%lu\", (unsigned long)REC->state, (unsigned long)REC->cpu_id\n"
)

_OLD_SCHED_PROCESS_EXIT = (
    "name: sched_process_exit\n"
    "ID: 65\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n"
    "\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n"
    "\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n"
    "\n"
    "print fmt: \"comm=%s pid=%d prio=%d\", REC->comm, REC->pid, REC->prio\n"
)

KERNEL: Tuple[Tuple[str, str], ...] = (
    ("sched", _SCHED_SCHED_SWITCH),
    ("sched", _SCHED_SCHED_WAKEUP),
    ("sched", _SCHED_SCHED_WAKEUP_NEW),
    ("sched", _SCHED_SCHED_WAKING),
    ("sched", _SCHED_SCHED_PROCESS_FORK),
    ("sched", _SCHED_SCHED_PROCESS_EXIT),
    ("sched", _SCHED_SCHED_PROCESS_EXEC),
    ("sched", _SCHED_SCHED_MIGRATE_TASK),
    ("irq", _IRQ_IRQ_HANDLER_ENTRY),
    ("irq", _IRQ_IRQ_HANDLER_EXIT),
    ("irq", _IRQ_SOFTIRQ_ENTRY),
    ("irq", _IRQ_SOFTIRQ_EXIT),
    ("irq", _IRQ_SOFTIRQ_RAISE),
    ("task", _TASK_TASK_NEWTASK),
    ("task", _TASK_TASK_RENAME),
    ("signal", _SIGNAL_SIGNAL_GENERATE),
    ("signal", _SIGNAL_SIGNAL_DELIVER),
    ("ftrace", _FTRACE_PRINT),
    ("power", _POWER_CPU_IDLE),
    ("power", _POWER_CPU_FREQUENCY),
)
OLDER: Tuple[Tuple[str, str], ...] = (
    ("sched", _OLD_SCHED_SWITCH),
    ("sched", _OLD_SCHED_WAKEUP),
    ("sched", _OLD_SCHED_WAKEUP_NEW),
    ("sched", _OLD_SCHED_PROCESS_EXIT),
)

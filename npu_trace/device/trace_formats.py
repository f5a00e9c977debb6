"""The format files of the real Ascend driver's tracepoints (hicann/driver `chan_trace_event.h`,
`trs_core_trace_event.h`), as the kernel prints them for the driver's TRACE_EVENTs: the same texts as
tests/data/ascend-driver/events (where each is held to hand-annotated records). An ftrace text import reads the
`ascend` profile's events with them when the text comes without its own formats; their struct-typed fields are
read member by member (`npu_trace.device.profiles.ASCEND_LAYOUTS`).
"""

from __future__ import annotations

from typing import Tuple

_TRS_CHAN_CQE = (
    "name: cqe\n"
    "ID: 1501\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:__data_loc char[] str;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\tfield:struct trs_id_inst inst;\toffset:12;\tsize:8;\tsigned:0;\n"
    "\tfield:struct trs_chan_cq_trace cq_trace;\toffset:20;\tsize:40;\tsigned:0;\n"
    "\tfield:ka_timespec64_t timestamp;\toffset:64;\tsize:16;\tsigned:0;\n"
    "\n"
    "print fmt: \"%s:\\tdevid=%u;tsid=%u;chan_id=%u;chan_name=%s;cqid=%u;cq_head=%u;round=%u;task_id=%u;str"
    "eam_id=%u;sq_id=%u;sq_head=%u;%lld.%06ld\", __get_str(str), REC->inst.devid, REC->inst.tsid, REC->cq_"
    "trace.chan_id, trs_chan_type_to_name(&REC->cq_trace.types), REC->cq_trace.cqid, REC->cq_trace.cq_hea"
    "d, REC->cq_trace.round, REC->cq_trace.task_id, REC->cq_trace.stream_id, REC->cq_trace.sq_id, REC->cq"
    "_trace.sq_head, (long long)REC->timestamp.tv_sec, REC->timestamp.tv_nsec / 1000\n"
)

_TRS_CHAN_RECV = (
    "name: recv\n"
    "ID: 1502\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:__data_loc char[] str;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\tfield:struct trs_id_inst inst;\toffset:12;\tsize:8;\tsigned:0;\n"
    "\tfield:struct trs_chan_recv_trace recv_trace;\toffset:20;\tsize:32;\tsigned:0;\n"
    "\tfield:ka_timespec64_t timestamp;\toffset:56;\tsize:16;\tsigned:0;\n"
    "\n"
    "print fmt: \"%s:\\tdevid=%u;tsid=%u;chan_id=%u;chan_name=%s;cqid=%u;cq_head=%u;cqe_num=%u;recv_cqe_num"
    "=%u;timeout=%d;%lld.%06ld\", __get_str(str), REC->inst.devid, REC->inst.tsid, REC->recv_trace.chan_id"
    ", trs_chan_type_to_name(&REC->recv_trace.types), REC->recv_trace.cqid, REC->recv_trace.cq_head, REC-"
    ">recv_trace.cqe_num, REC->recv_trace.recv_cqe_num, REC->recv_trace.timeout, (long long)REC->timestam"
    "p.tv_sec, REC->timestamp.tv_nsec / 1000\n"
)

_TRS_CHAN_SQE = (
    "name: sqe\n"
    "ID: 1500\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:__data_loc char[] str;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\tfield:struct trs_id_inst inst;\toffset:12;\tsize:8;\tsigned:0;\n"
    "\tfield:struct trs_chan_sq_trace sq_trace;\toffset:20;\tsize:40;\tsigned:0;\n"
    "\tfield:ka_timespec64_t timestamp;\toffset:64;\tsize:16;\tsigned:0;\n"
    "\n"
    "print fmt: \"%s:\\tdevid=%u;tsid=%u;chan_id=%u;chan_name=%s;sqid=%u;sq_head=%u;sq_tail=%u;sqe_type=%u;"
    "task_id=%u;stream_id=%u;%lld.%06ld\", __get_str(str), REC->inst.devid, REC->inst.tsid, REC->sq_trace."
    "chan_id, trs_chan_type_to_name(&REC->sq_trace.types), REC->sq_trace.sqid, REC->sq_trace.sq_head, REC"
    "->sq_trace.sq_tail, REC->sq_trace.type, REC->sq_trace.task_id, REC->sq_trace.stream_id, (long long)R"
    "EC->timestamp.tv_sec, REC->timestamp.tv_nsec / 1000\n"
)

_TRS_CORE_LOGIC_CQ_RECV = (
    "name: logic_cq_recv\n"
    "ID: 1504\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:__data_loc char[] str;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\tfield:struct trs_id_inst inst;\toffset:12;\tsize:8;\tsigned:0;\n"
    "\tfield:struct trs_logic_cq_recv_trace_t recv_trace;\toffset:20;\tsize:12;\tsigned:0;\n"
    "\tfield:ka_timespec64_t timestamp;\toffset:32;\tsize:16;\tsigned:0;\n"
    "\n"
    "print fmt: \"%s:\\tdevid=%u;tsid=%u;logic_cqid=%u;report_cqe_num=%u;timeout=%d;%lld.%06ld\", __get_str("
    "str), REC->inst.devid, REC->inst.tsid, REC->recv_trace.logic_cqid, REC->recv_trace.report_cqe_num, R"
    "EC->recv_trace.timeout, (long long)REC->timestamp.tv_sec, REC->timestamp.tv_nsec / 1000\n"
)

_TRS_CORE_LOGIC_CQE = (
    "name: logic_cqe\n"
    "ID: 1503\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:__data_loc char[] str;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\tfield:struct trs_id_inst inst;\toffset:12;\tsize:8;\tsigned:0;\n"
    "\tfield:struct trs_logic_cqe_trace cq_trace;\toffset:24;\tsize:56;\tsigned:0;\n"
    "\tfield:ka_timespec64_t timestamp;\toffset:80;\tsize:16;\tsigned:0;\n"
    "\n"
    "print fmt: \"%s:\\tdevid=%u;tsid=%u;logic_cqid=%u;head=%u;tail=%u;task_id=%u;stream_id=%u;sqid=%u;sq_h"
    "ead=%u;sqe_type=%u;match_flag=%u;%lld.%06ld\", __get_str(str), REC->inst.devid, REC->inst.tsid, REC->"
    "cq_trace.logic_cqid, REC->cq_trace.head, REC->cq_trace.tail, REC->cq_trace.task_id, REC->cq_trace.st"
    "ream_id, REC->cq_trace.sqid, REC->cq_trace.sq_head, REC->cq_trace.sqe_type, REC->cq_trace.match_flag"
    ", (long long)REC->timestamp.tv_sec, REC->timestamp.tv_nsec / 1000\n"
)

DRIVER: Tuple[Tuple[str, str], ...] = (
    ("trs_chan", _TRS_CHAN_CQE),
    ("trs_chan", _TRS_CHAN_RECV),
    ("trs_chan", _TRS_CHAN_SQE),
    ("trs_core", _TRS_CORE_LOGIC_CQ_RECV),
    ("trs_core", _TRS_CORE_LOGIC_CQE),
)

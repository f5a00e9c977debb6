/* Prints the offsets of the real HAL structs as the simulator's hal_real.h lays them out, compiled by the host's
 * gcc, under the names bpf/hal_uprobes.bpf.c gives them, and the task layouts' offsets (layout_*) that
 * npu_trace.device.chips hands it (tests/test_bpf_hal_abi.py compares them). */
#include <stddef.h>
#include <stdio.h>

#include "hal_real.h"

int main(void) {
    printf("TSI_TS_ID %zu\n", offsetof(struct sim_task_send_info, ts_id));
    printf("TSI_SQ_ID %zu\n", offsetof(struct sim_task_send_info, sq_id));
    printf("TSI_SQE_ADDR %zu\n", offsetof(struct sim_task_send_info, sqe_addr));
    printf("TSI_SQE_NUM %zu\n", offsetof(struct sim_task_send_info, sqe_num));
    printf("TSI_POS %zu\n", offsetof(struct sim_task_send_info, pos));
    printf("RRI_TS_ID %zu\n", offsetof(struct sim_report_recv_info, ts_id));
    printf("RRI_CQ_ID %zu\n", offsetof(struct sim_report_recv_info, cq_id));
    printf("RRI_TIMEOUT %zu\n", offsetof(struct sim_report_recv_info, timeout));
    printf("RRI_REPORT_CQE_NUM %zu\n", offsetof(struct sim_report_recv_info, report_cqe_num));
    printf("RRI_STREAM_ID %zu\n", offsetof(struct sim_report_recv_info, stream_id));
    printf("RRI_TASK_ID %zu\n", offsetof(struct sim_report_recv_info, task_id));
    printf("SMI_TS_ID %zu\n", offsetof(struct sim_sq_mem_get_input, ts_id));
    printf("SMI_SQ_ID %zu\n", offsetof(struct sim_sq_mem_get_input, sq_id));
    printf("SMI_CMD_COUNT %zu\n", offsetof(struct sim_sq_mem_get_input, cmd_count));
    printf("SMO_CMD_COUNT %zu\n", offsetof(struct sim_sq_mem_get_output, cmd_count));
    printf("SMO_CMD_PTR %zu\n", offsetof(struct sim_sq_mem_get_output, cmd_ptr));
    printf("SMO_POS %zu\n", offsetof(struct sim_sq_mem_get_output, pos));
    printf("SQM_TS_ID %zu\n", offsetof(struct sim_sq_msg_info, ts_id));
    printf("SQM_SQ_ID %zu\n", offsetof(struct sim_sq_msg_info, sq_id));
    printf("SQM_CMD_COUNT %zu\n", offsetof(struct sim_sq_msg_info, cmd_count));
    printf("SQM_REPORT_COUNT %zu\n", offsetof(struct sim_sq_msg_info, report_count));
    printf("layout_stars_stream %zu\n", offsetof(struct sim_sqe_header, stream_id));
    printf("layout_stars_task %zu\n", offsetof(struct sim_sqe_header, task_id));
    printf("layout_ts_stream %zu\n", offsetof(struct sim_ts_command_header, stream_id));
    printf("layout_ts_task %zu\n", offsetof(struct sim_ts_command_header, task_id));
    printf("HAL_FLAG_DEVID_MASK %llu\n", (unsigned long long)SIM_MEM_DEVID_MASK);
    printf("sizeof_task_send_info %zu\n", sizeof(struct sim_task_send_info));
    printf("sizeof_report_recv_info %zu\n", sizeof(struct sim_report_recv_info));
    printf("sizeof_sq_mem_get_input %zu\n", sizeof(struct sim_sq_mem_get_input));
    printf("sizeof_sq_mem_get_output %zu\n", sizeof(struct sim_sq_mem_get_output));
    printf("sizeof_sq_msg_info %zu\n", sizeof(struct sim_sq_msg_info));
    return 0;
}

/* Prints the offsets of the real HAL structs as the simulator's hal_real.h lays them out, compiled by the host's
 * gcc, under the names bpf/hal_uprobes.bpf.c gives them (tests/test_bpf_hal_abi.py compares the two). */
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
    printf("SQE_STREAM_ID %zu\n", offsetof(struct sim_sqe_header, stream_id));
    printf("SQE_TASK_ID %zu\n", offsetof(struct sim_sqe_header, task_id));
    printf("HAL_FLAG_DEVID_MASK %llu\n", (unsigned long long)SIM_MEM_DEVID_MASK);
    printf("sizeof_task_send_info %zu\n", sizeof(struct sim_task_send_info));
    printf("sizeof_report_recv_info %zu\n", sizeof(struct sim_report_recv_info));
    return 0;
}

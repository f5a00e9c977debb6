/* The real HAL's structs as the simulator's libascend_hal.so (hal_real.c) and the executor's -H mode
 * (npu_sim.c) use them: the layouts of the driver package's pkg_inc/hal_pkg/trs_pkg.h (hicann/driver), written
 * from the documented field lists (docs/architecture.md, "HAL ABIs"). LP64 (x86-64, aarch64). */
#ifndef NPU_SIM_HAL_REAL_H
#define NPU_SIM_HAL_REAL_H

#include <stdint.h>

#define SIM_SQCQ_RESV_LENGTH 8
#define SIM_MEM_DEVID_MASK 0x3FFULL /* halMemAlloc flag bits 0-9: the logic device id */

struct sim_task_send_info {  /* struct halTaskSendInfo */
    int32_t type;            /* drvSqCqType_t: an enum, 4 bytes */
    uint32_t ts_id;
    uint32_t sq_id;
    int32_t timeout;
    uint8_t *sqe_addr;
    uint32_t sqe_num;
    uint32_t pos;            /* output: the first SQE's position in the SQ */
    uint32_t res[SIM_SQCQ_RESV_LENGTH];
};

struct sim_report_recv_info {  /* struct halReportRecvInfo */
    int32_t type;
    uint32_t ts_id;
    uint32_t cq_id;
    int32_t timeout;
    uint8_t *cqe_addr;
    uint32_t cqe_num;
    uint32_t report_cqe_num;   /* output: the reports received */
    uint32_t stream_id;
    uint32_t task_id;
    uint32_t res[SIM_SQCQ_RESV_LENGTH];
};

struct sim_sqe_header {  /* the first 8 bytes of a STARS SQE (rtStarsSqeHeader_t): type and flag bits, */
    uint8_t type_bits;   /* block dim, stream id, task id */
    uint8_t flag_bits;
    uint16_t block_dim;
    uint16_t stream_id;
    uint16_t task_id;
};

#define SIM_SQE_SIZE 64

struct sim_ts_command_header {  /* the first 4 bytes of a TS command (rtCommand_t, the 910's and 310P's tasks) */
    uint16_t stream_id;
    uint16_t task_id;
};

struct sim_sq_mem_get_input {  /* struct halSqMemGetInput */
    int32_t type;
    uint32_t ts_id;
    uint32_t sq_id;
    uint32_t cmd_count;          /* slots asked for */
    uint32_t res[SIM_SQCQ_RESV_LENGTH];
};

struct sim_sq_mem_get_output {  /* struct halSqMemGetOutput */
    uint32_t cmd_count;          /* slots granted */
    volatile void *cmd_ptr;      /* where to write the commands */
    uint32_t pos;                /* the slot's position in the SQ */
    uint32_t res[SIM_SQCQ_RESV_LENGTH - 1];
};

struct sim_sq_msg_info {  /* struct halSqMsgInfo */
    int32_t type;
    uint32_t ts_id;
    uint32_t sq_id;
    uint32_t cmd_count;
    uint32_t report_count;
    uint32_t res[SIM_SQCQ_RESV_LENGTH];
};

/* The simulator's hook: what the next HAL call of this thread returns, how long it takes, and the output it
 * writes (halMemAlloc: *pp; halSqTaskSend: info->pos; halCqReportRecv: info->report_cqe_num; halSqMemGet:
 * out->pos). */
typedef void (*sim_hal_next_fn)(int32_t ret, uint64_t delay_ns, uint64_t out);

#endif

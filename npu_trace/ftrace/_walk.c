/* The page walker of npu_trace.ftrace.walk, compiled: a whole batch of one CPU's ring-buffer pages per call.
 *
 * npu_trace/ftrace/framing.py specifies the page framing this walks, rule for rule, and the reasons a page or
 * a record is malformed (enum malformed_reason below, exported as REASONS, in framing.MALFORMED's order);
 * walk.py holds the pure-Python twin, walk_py, whose results are identical. This file trusts nothing it reads: every load from a page is bounds-checked against
 * that page (a load outside it reads 0; the walk's own checks never ask for one), page and table sizes are
 * checked on entry, and timestamps are 128-bit so that they equal Python's unbounded integers (a page stamp
 * near 2**64 plus extends goes past 64 bits). The GIL is released while walking and gathering; the buffers are
 * held through the buffer protocol for the whole call.
 *
 * walk(buf, pages, layout, last_ts_hi, last_ts_lo, table, big[, per_page])
 *   buf     the bytes holding the pages
 *   pages   int64 pairs (offset, length) of each page in buf, native byte order
 *   layout  (ts_offset, commit_size, data_offset) of the page header
 *   table   int32, native order: need[65536] (minimum payload size, -1: not wanted, -2: no format describes
 *           it: judged as one not wanted, but handed on as a raw row), then dyn[65536] (0, or
 *           where in the table this id's dynamic fields are listed: a count, then (where, base) pairs)
 *   big     the pages are big-endian
 *   per_page also say where each page ended
 * -> (ts, etype, offset, length, losses, (last_ts_hi, last_ts_lo, backwards, pages, skipped, malformed), ends)
 *   the four columns as bytearrays (int64, uint16, int64, uint32, native order); losses: a list of
 *   (index of the next event, kind: 0 page_missed, 1 + a malformed_reason, lost, ts_hi, ts_lo, page); the counters are
 *   this call's increments, last_ts the new value; ends (None unless per_page): bytes of one PageEnd per page
 *   (int64 events so far, uint64 ts_hi, uint64 ts_lo, int64 backwards so far), native order.
 *
 * gather(buf, offsets, size) -> bytes: the `size` bytes at each int64 offset, concatenated.
 * gather_rows(bufs, which, offsets, size) -> bytes: the same over a tuple of buffers, row i from
 *   bufs[which[i]] (int32 numbers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#ifndef __SIZEOF_INT128__
#error "the walker needs a 128-bit integer type (its timestamps are exact, as Python's)"
#endif
typedef unsigned __int128 wide;

#define TYPE_PADDING 29
#define TYPE_TIME_EXTEND 30
#define TYPE_TIME_STAMP 31
#define TS_SHIFT 27
#define TS_MSB ((uint64_t)0xF8 << 56)
#define TS_MAX ((wide)INT64_MAX) /* the last stamp a record may carry */
#define MISSED_EVENTS ((uint64_t)1 << 31)
#define MISSED_STORED ((uint64_t)1 << 30)
#define COMMIT_MASK (MISSED_STORED - 1)
#define NTYPES 65536
#define KEEP_RAW (-2) /* need[]: an event no format describes, handed on as its raw bytes (not skipped) */
#define LOSS_PAGE_MISSED 0
#define LOSS_MALFORMED 1 /* + the reason */

/* why a page or a record is malformed: framing.MALFORMED, in this order */
enum malformed_reason {
    SHORT_PAGE,
    COMMIT_PAST_PAGE,
    BAD_LENGTH,
    RECORD_PAST_COMMIT,
    CUT_HEADER,
    SHORT_RECORD,
    DYNAMIC_OUTSIDE,
    TS_OVERFLOW,
    N_REASONS
};
static const char *const REASON_NAMES[N_REASONS] = {
    "short_page", "commit_past_page", "bad_length", "record_past_commit",
    "cut_header", "short_record", "dynamic_outside", "ts_overflow",
};

typedef struct {
    const uint8_t *p;
    int64_t len;
    int swap; /* the page's byte order is not this host's */
} Page;

typedef struct {
    int64_t ts_offset, commit_size, data_offset;
} Layout;

typedef struct {
    const uint8_t *t; /* int32s, read with memcpy (the buffer may be unaligned) */
    int64_t n;
} Table;

typedef struct {
    int64_t index;
    int kind;
    uint64_t lost;
    wide ts;
    int64_t page; /* the page (of this call's) it was found on */
} LossRec;

typedef struct { /* after each page: what a caller that cuts the walk at page boundaries needs */
    int64_t end;          /* event records so far */
    uint64_t ts_hi, ts_lo; /* the walk's time */
    int64_t backwards;    /* backwards steps so far (this call's) */
} PageEnd;

typedef struct {
    PyObject *cols[4]; /* bytearrays of cap records: ts, etype, offset, length */
    int64_t *ts, *off;
    uint16_t *etype;
    uint32_t *len;
    int64_t n, cap;
    LossRec *loss;
    int64_t nloss, loss_cap;
    wide last_ts;
    unsigned long long backwards, pages, skipped, malformed;
    int bad_table, overflow;
    int64_t page; /* the page being walked */
    PageEnd *ends; /* one per page when asked for, else NULL */
} Walker;

/* ---- loads: bounds-checked, in the page's byte order --------------------------------------------------- */
static uint16_t load16(const Page *pg, int64_t at)
{
    uint16_t v;
    if (at < 0 || at > pg->len - 2)
        return 0;
    memcpy(&v, pg->p + at, 2);
    return pg->swap ? (uint16_t)((v >> 8) | (v << 8)) : v;
}

static uint32_t load32(const Page *pg, int64_t at)
{
    uint32_t v;
    if (at < 0 || at > pg->len - 4)
        return 0;
    memcpy(&v, pg->p + at, 4);
    return pg->swap ? __builtin_bswap32(v) : v;
}

static uint64_t load64(const Page *pg, int64_t at)
{
    uint64_t v;
    if (at < 0 || at > pg->len - 8)
        return 0;
    memcpy(&v, pg->p + at, 8);
    return pg->swap ? __builtin_bswap64(v) : v;
}

static int32_t table_at(const Table *w, int64_t i)
{
    int32_t v;
    if (i < 0 || i >= w->n)
        return -1;
    memcpy(&v, w->t + 4 * i, 4);
    return v;
}

/* ---- output ---------------------------------------------------------------------------------------------- */
static int grow(void **arr, int64_t cap, size_t item)
{
    void *p = PyMem_RawRealloc(*arr, (size_t)cap * item);
    if (p == NULL)
        return -1;
    *arr = p;
    return 0;
}

/* The columns hold `cap` records: at most one per 8 bytes of each page's data (an event record takes at least 8:
 * a header word and a payload word, or two header words and the 2-byte id; a raw row cut at the commit's end at
 * least 6, and only the last), allocated before the walk and never touched beyond what it writes, so the bound
 * costs address space, not memory. */
static int emit(Walker *w, wide ts, int etype, int64_t offset, int64_t size)
{
    if (w->n >= w->cap) {
        w->overflow = 1; /* cannot happen (see above); refused all the same */
        return -1;
    }
    w->ts[w->n] = (int64_t)ts; /* at most 2**63 - 1: the caller judged a stamp past it malformed */
    w->etype[w->n] = (uint16_t)etype;
    w->off[w->n] = offset;
    w->len[w->n] = (uint32_t)size;
    w->n++;
    return 0;
}

static int loss(Walker *w, int kind, uint64_t lost, wide ts)
{
    if (w->nloss == w->loss_cap) {
        int64_t cap = w->loss_cap ? 2 * w->loss_cap : 16;
        if (grow((void **)&w->loss, cap, sizeof(LossRec)))
            return -1;
        w->loss_cap = cap;
    }
    LossRec rec = {w->n, kind, lost, ts, w->page};
    w->loss[w->nloss++] = rec;
    return 0;
}

static int malformed(Walker *w, wide ts, enum malformed_reason why)
{
    w->malformed++;
    return loss(w, LOSS_MALFORMED + (int)why, 1, ts);
}

/* ---- the walk -------------------------------------------------------------------------------------------- */
static wide abs_ts(wide stamp, wide prev)
{
    wide msb = prev & (wide)TS_MSB;
    if (msb) {
        stamp |= msb;
        if (stamp < prev)
            stamp += (wide)1 << 59;
    }
    return stamp;
}

/* 1: every dynamic field's data lies inside the record; 0: it does not (malformed); -1: a bad table. */
static int dynamic_ok(Walker *w, const Table *t, const Page *pg, int etype, int64_t start, int64_t size)
{
    int32_t at = table_at(t, NTYPES + etype);
    if (at == 0)
        return 1;
    int32_t count = table_at(t, at);
    if (at < 2 * NTYPES || count < 0 || (int64_t)at + 1 + 2 * (int64_t)count > t->n) {
        w->bad_table = 1;
        return -1;
    }
    for (int32_t i = 0; i < count; i++) {
        int64_t where = table_at(t, at + 1 + 2 * i), base = table_at(t, at + 2 + 2 * i);
        if (where < 0 || base < 0 || where + 4 > size)
            return 0;
        uint32_t loc = load32(pg, start + where);
        if ((int64_t)(loc & 0xFFFF) + base + (int64_t)(loc >> 16) > size)
            return 0;
    }
    return 1;
}

static int walk_records(Walker *w, const Table *t, const Page *pg, int64_t base, int64_t pos, int64_t end, wide ts)
{
    int rc = 0;
    while (rc == 0 && pos + 6 <= end) {
        uint32_t hdr = load32(pg, pos), delta = hdr >> 5;
        int tl = (int)(hdr & 31), etype;
        int64_t start, size, need;
        if (tl >= 1 && tl <= 28) {
            ts += delta;
            size = (int64_t)tl << 2;
            start = pos + 4;
            pos = start + size;
            etype = load16(pg, start);
            need = table_at(t, etype);
            if (need < 0) {
                if (need != KEEP_RAW)
                    w->skipped++;
                else if (ts > TS_MAX) /* kept as its bytes, but stamped past 2**63 - 1 */
                    rc = malformed(w, TS_MAX, TS_OVERFLOW);
                else /* its bytes up to the commit's end at most */
                    rc = emit(w, ts, etype, base + start, (pos > end ? end : pos) - start);
                continue;
            }
        } else if (tl == 0) {
            if (pos + 8 > end)
                break;
            ts += delta;
            size = (int64_t)load32(pg, pos + 4) - 4;
            start = pos + 8;
            pos = start + size;
            etype = size >= 2 && pos <= end ? load16(pg, start) : -1;
            need = etype >= 0 ? table_at(t, etype) : -1;
            if (need < 0) {
                if (size < 8 || pos > end) {
                    rc = malformed(w, ts, size < 8 ? BAD_LENGTH : RECORD_PAST_COMMIT);
                    break;
                }
                if (need != KEEP_RAW)
                    w->skipped++;
                else if (ts > TS_MAX)
                    rc = malformed(w, TS_MAX, TS_OVERFLOW);
                else
                    rc = emit(w, ts, etype, base + start, size);
                continue;
            }
        } else if (pos + 8 > end) { /* every remaining kind carries a second word */
            if (!(tl == TYPE_PADDING && delta == 0))
                rc = malformed(w, ts, CUT_HEADER);
            break;
        } else if (tl == TYPE_TIME_EXTEND) {
            ts += ((wide)load32(pg, pos + 4) << TS_SHIFT) | delta;
            pos += 8;
            continue;
        } else if (tl == TYPE_TIME_STAMP) {
            wide before = ts;
            ts = abs_ts(((wide)load32(pg, pos + 4) << TS_SHIFT) | delta, ts);
            w->backwards += ts < before;
            pos += 8;
            continue;
        } else { /* padding: delta 0 ends the page, otherwise a discarded record */
            if (delta == 0)
                break;
            pos += 4 + (int64_t)load32(pg, pos + 4);
            continue;
        }
        if (pos > end || size < need) {
            rc = malformed(w, ts, pos > end ? RECORD_PAST_COMMIT : SHORT_RECORD);
            if (pos > end)
                break;
            continue;
        }
        int ok = dynamic_ok(w, t, pg, etype, start, size);
        if (ok > 0 && ts > TS_MAX) /* past 2**63 - 1: malformed, stamped there */
            rc = malformed(w, TS_MAX, TS_OVERFLOW);
        else
            rc = ok < 0 ? -1 : ok ? emit(w, ts, etype, base + start, size) : malformed(w, ts, DYNAMIC_OUTSIDE);
    }
    w->last_ts = ts;
    return rc;
}

static int walk_page(Walker *w, const Table *t, const Layout *h, const Page *pg, int64_t base)
{
    if (pg->len < h->data_offset)
        return malformed(w, w->last_ts, SHORT_PAGE); /* stamped where the stream stands */
    uint64_t page_ts = load64(pg, h->ts_offset);
    uint64_t commit = h->commit_size == 8 ? load64(pg, h->ts_offset + 8) : load32(pg, h->ts_offset + 8);
    if ((wide)page_ts < w->last_ts)
        w->backwards++;
    w->pages++;
    int64_t end = h->data_offset + (int64_t)(commit & COMMIT_MASK);
    if (end > pg->len) {
        if (malformed(w, page_ts, COMMIT_PAST_PAGE))
            return -1;
        end = pg->len;
    }
    if (commit & MISSED_EVENTS) {
        uint64_t missed = 0; /* the kernel stores the count only when there is room */
        if ((commit & MISSED_STORED) && end + h->commit_size <= pg->len)
            missed = h->commit_size == 8 ? load64(pg, end) : load32(pg, end);
        if (loss(w, LOSS_PAGE_MISSED, missed, page_ts))
            return -1;
    }
    return walk_records(w, t, pg, base, h->data_offset, end, page_ts);
}

/* ---- Python glue ----------------------------------------------------------------------------------------- */
static const size_t ITEM[4] = {8, 2, 8, 4};

static int walker_alloc(Walker *w, int64_t cap)
{
    w->cap = cap;
    for (int i = 0; i < 4; i++) {
        if (cap > PY_SSIZE_T_MAX / 8 || !(w->cols[i] = PyByteArray_FromStringAndSize(NULL, cap * (int64_t)ITEM[i])))
            return -1;
    }
    w->ts = (int64_t *)PyByteArray_AS_STRING(w->cols[0]);
    w->etype = (uint16_t *)PyByteArray_AS_STRING(w->cols[1]);
    w->off = (int64_t *)PyByteArray_AS_STRING(w->cols[2]);
    w->len = (uint32_t *)PyByteArray_AS_STRING(w->cols[3]);
    return 0;
}

static void walker_free(Walker *w)
{
    for (int i = 0; i < 4; i++)
        Py_CLEAR(w->cols[i]);
    PyMem_RawFree(w->loss);
    PyMem_RawFree(w->ends);
}

static PyObject *losses_list(const Walker *w)
{
    PyObject *list = PyList_New(w->nloss);
    for (int64_t i = 0; list && i < w->nloss; i++) {
        const LossRec *r = &w->loss[i];
        PyObject *item = Py_BuildValue("(LiKKKL)", (long long)r->index, r->kind, (unsigned long long)r->lost,
                                       (unsigned long long)(r->ts >> 64), (unsigned long long)r->ts,
                                       (long long)r->page);
        if (item == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, item);
    }
    return list;
}

static PyObject *walk_result(Walker *w, Py_ssize_t npages)
{
    for (int i = 0; i < 4; i++) {
        if (PyByteArray_Resize(w->cols[i], w->n * (int64_t)ITEM[i]))
            return NULL;
    }
    PyObject *ends = w->ends == NULL ? (Py_INCREF(Py_None), Py_None)
                                     : PyBytes_FromStringAndSize((const char *)w->ends, npages * sizeof(PageEnd));
    if (ends == NULL)
        return NULL;
    PyObject *out = Py_BuildValue("(OOOON(KKKKKK)N)", w->cols[0], w->cols[1], w->cols[2], w->cols[3], losses_list(w),
                                  (unsigned long long)(w->last_ts >> 64), (unsigned long long)w->last_ts,
                                  w->backwards, w->pages, w->skipped, w->malformed, ends);
    return out;
}

/* NULL when the arguments can be walked (and *cap the columns' bound), else what is wrong. */
static const char *check_args(const Py_buffer *buf, const Py_buffer *pages, const Layout *h, const Table *t,
                              int64_t *cap)
{
    if (pages->len % 16)
        return "pages: (offset, length) int64 pairs expected";
    if (h->ts_offset < 0 || (h->commit_size != 4 && h->commit_size != 8)
        || h->ts_offset + 8 + h->commit_size > h->data_offset)
        return "layout: (ts_offset, commit_size 4 or 8, data_offset past the commit) expected";
    if (t->n < 2 * NTYPES || t->n > INT32_MAX)
        return "table: need[65536], dyn[65536] and the dynamic fields expected";
    for (Py_ssize_t i = 0; i < pages->len / 16; i++) {
        int64_t off, len;
        memcpy(&off, (const char *)pages->buf + 16 * i, 8);
        memcpy(&len, (const char *)pages->buf + 16 * i + 8, 8);
        if (off < 0 || len < 0 || off > buf->len || len > buf->len - off)
            return "pages: a page lies outside the buffer";
        if (len > h->data_offset) /* the last may be a raw row cut at the page's end: 6 bytes at least */
            *cap += (len - h->data_offset + 2) / 8;
        if (*cap > PY_SSIZE_T_MAX / 8)
            return "pages: too many";
    }
    return NULL;
}

static int walk_pages(Walker *w, const Py_buffer *buf, const Py_buffer *pages, const Layout *h, const Table *t,
                      int big)
{
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < pages->len / 16; i++) {
        int64_t off, len;
        memcpy(&off, (const char *)pages->buf + 16 * i, 8);
        memcpy(&len, (const char *)pages->buf + 16 * i + 8, 8);
        Page pg = {(const uint8_t *)buf->buf + off, len, big != PY_BIG_ENDIAN};
        w->page = i;
        rc = walk_page(w, t, h, &pg, off);
        if (w->ends != NULL) {
            PageEnd e = {w->n, (uint64_t)(w->last_ts >> 64), (uint64_t)w->last_ts, (int64_t)w->backwards};
            w->ends[i] = e;
        }
    }
    return rc;
}

static PyObject *py_walk(PyObject *self, PyObject *args)
{
    Py_buffer buf, pages, table;
    long long ts_offset, commit_size, data_offset;
    unsigned long long hi, lo;
    int big, rc, per_page = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*(LLL)KKy*p|p:walk", &buf, &pages, &ts_offset, &commit_size, &data_offset, &hi,
                          &lo, &table, &big, &per_page))
        return NULL;
    Layout h = {ts_offset, commit_size, data_offset};
    Table t = {(const uint8_t *)table.buf, table.len / 4};
    Walker w;
    memset(&w, 0, sizeof(w));
    w.last_ts = ((wide)hi << 64) | lo;
    PyObject *out = NULL;
    int64_t cap = 0;
    const char *bad = check_args(&buf, &pages, &h, &t, &cap);
    if (bad != NULL) {
        PyErr_SetString(PyExc_ValueError, bad);
        goto done;
    }
    if (walker_alloc(&w, cap))
        goto done;
    if (per_page && pages.len && !(w.ends = PyMem_RawMalloc((size_t)(pages.len / 16) * sizeof(PageEnd)))) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = walk_pages(&w, &buf, &pages, &h, &t, big);
    Py_END_ALLOW_THREADS
    if (rc == 0)
        out = walk_result(&w, pages.len / 16);
    else if (w.bad_table)
        PyErr_SetString(PyExc_ValueError, "table: a dynamic field list lies outside the table");
    else if (w.overflow)
        PyErr_SetString(PyExc_RuntimeError, "walk: more records than the pages can hold");
    else
        PyErr_NoMemory();
done:
    walker_free(&w);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&pages);
    PyBuffer_Release(&table);
    return out;
}

static const char *gather_into(char *dst, const Py_buffer *buf, const Py_buffer *offsets, Py_ssize_t size)
{
    for (Py_ssize_t i = 0; i < offsets->len / 8; i++) {
        int64_t off;
        memcpy(&off, (const char *)offsets->buf + 8 * i, 8);
        if (off < 0 || off > buf->len - size)
            return "gather: a record lies outside the buffer";
        memcpy(dst + i * size, (const char *)buf->buf + off, (size_t)size);
    }
    return NULL;
}

static PyObject *py_gather(PyObject *self, PyObject *args)
{
    Py_buffer buf, offsets;
    Py_ssize_t size;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*n:gather", &buf, &offsets, &size))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = offsets.len / 8;
    const char *bad = NULL;
    if (offsets.len % 8 || size < 0)
        PyErr_SetString(PyExc_ValueError, "gather: int64 offsets and a size >= 0 expected");
    else if (size && n > PY_SSIZE_T_MAX / size)
        PyErr_SetString(PyExc_OverflowError, "gather: too many bytes");
    else if ((out = PyBytes_FromStringAndSize(NULL, n * size)) != NULL) {
        char *dst = PyBytes_AS_STRING(out);
        Py_BEGIN_ALLOW_THREADS
        bad = gather_into(dst, &buf, &offsets, size);
        Py_END_ALLOW_THREADS
        if (bad != NULL) {
            PyErr_SetString(PyExc_ValueError, bad);
            Py_CLEAR(out);
        }
    }
    PyBuffer_Release(&buf);
    PyBuffer_Release(&offsets);
    return out;
}

/* gather_rows(bufs, which, offsets, size): gather() over several buffers, row i from bufs[which[i]]. */
static PyObject *py_gather_rows(PyObject *self, PyObject *args)
{
    PyObject *bufs;
    Py_buffer which, offsets;
    Py_ssize_t size;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!y*y*n:gather_rows", &PyTuple_Type, &bufs, &which, &offsets, &size))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t nbuf = PyTuple_GET_SIZE(bufs), n = offsets.len / 8;
    Py_buffer *views = PyMem_RawCalloc(nbuf ? (size_t)nbuf : 1, sizeof(Py_buffer));
    Py_ssize_t held = 0;
    const char *bad = NULL;
    if (views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (offsets.len % 8 || which.len != n * 4 || size < 0) {
        PyErr_SetString(PyExc_ValueError, "gather_rows: int32 buffer numbers, int64 offsets, one each, size >= 0");
        goto done;
    }
    if (size && n > PY_SSIZE_T_MAX / size) {
        PyErr_SetString(PyExc_OverflowError, "gather_rows: too many bytes");
        goto done;
    }
    for (; held < nbuf; held++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(bufs, held), &views[held], PyBUF_SIMPLE))
            goto done;
    }
    if ((out = PyBytes_FromStringAndSize(NULL, n * size)) == NULL)
        goto done;
    char *dst = PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && bad == NULL; i++) {
        int32_t b;
        int64_t off;
        memcpy(&b, (const char *)which.buf + 4 * i, 4);
        memcpy(&off, (const char *)offsets.buf + 8 * i, 8);
        if (b < 0 || b >= nbuf)
            bad = "gather_rows: a buffer number out of range";
        else if (off < 0 || off > views[b].len - size)
            bad = "gather_rows: a record lies outside its buffer";
        else
            memcpy(dst + i * size, (const char *)views[b].buf + off, (size_t)size);
    }
    Py_END_ALLOW_THREADS
    if (bad != NULL) {
        PyErr_SetString(PyExc_ValueError, bad);
        Py_CLEAR(out);
    }
done:
    for (Py_ssize_t i = 0; i < held; i++)
        PyBuffer_Release(&views[i]);
    PyMem_RawFree(views);
    PyBuffer_Release(&which);
    PyBuffer_Release(&offsets);
    return out;
}

static PyMethodDef methods[] = {
    {"gather_rows", py_gather_rows, METH_VARARGS, "gather() over several buffers: row i from bufs[which[i]]."},
    {"walk", py_walk, METH_VARARGS, "Walk a batch of one CPU's ring-buffer pages (see npu_trace.ftrace.walk)."},
    {"gather", py_gather, METH_VARARGS, "The first `size` bytes of each record, concatenated."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_walk", "The compiled page walker (npu_trace.ftrace.walk).", -1, methods, NULL, NULL, NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__walk(void)
{
    PyObject *mod = PyModule_Create(&module), *names = PyTuple_New(N_REASONS);
    for (int i = 0; mod && names && i < N_REASONS; i++) {
        PyObject *name = PyUnicode_FromString(REASON_NAMES[i]);
        if (name == NULL)
            Py_CLEAR(names);
        else
            PyTuple_SET_ITEM(names, i, name);
    }
    if (mod == NULL || names == NULL || PyModule_AddObject(mod, "REASONS", names)) {
        Py_XDECREF(names);
        Py_XDECREF(mod);
        return NULL;
    }
    return mod;
}

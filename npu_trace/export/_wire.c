/* The byte assembler of npu_trace.export.wire, compiled: many rows of an exported trace's packets or lines,
 * each laid out by its template, in one call.
 *
 * wire.py holds the rules and the pure-Python twin, assemble_py, whose output is identical. A template is a
 * sequence of int32 words (opcodes and their operands); row i is written by template which[i], reading its
 * values from column c at cols[i * ncols + c]. Every operand is checked before the GIL is released (a column, a
 * constant or a table that does not exist is a ValueError), every table code per row while writing (one out
 * of its table is a ValueError after the call), and nesting is checked per row. Only the templates the rows
 * use are checked (and need their columns).
 *
 * assemble(prog, starts, which, cols, ncols, consts, tables, out, at) -> where the rows' bytes end in `out`
 *   written into `out` from offset `at`. A bytearray is grown when too small, never shrunk, so that the pages
 *   it holds are used again from call to call. Any other writable buffer keeps its size: when the rows may
 *   not fit after `at` (their bound, the most bytes they can take, passes its end) nothing is written and the
 *   result is minus the size it needs (at + the bound), so that the caller can give room and call again.
 *   prog    int32 words of every template, one after the other
 *   starts  int32: template t is prog[starts[t]:starts[t + 1]]
 *   which   int32: the template of each row (n rows)
 *   cols    int64: n rows of ncols values, row after row (a row's values side by side: one cache line)
 *   consts  a tuple of bytes; tables: a tuple of tuples of bytes
 * Opcodes (operands after them):
 *   CONST k          consts[k]
 *   VARINT c         the column's value as protobuf's base-128 varint (its 64 bits unsigned: a negative value
 *                    takes ten bytes, as protobuf writes an int64)
 *   FIXED64 c        its 64 bits, little-endian
 *   TABLE c t        tables[t][value] (a negative value: nothing)
 *   BEGIN / END      a length-delimited part: what lies between them, after its length as a varint
 *   SKIPZ c k        skip the next k operations when the value is 0
 *   DEC c            the value in decimal (signed)
 *   MICROS c         a signed count of nanoseconds as microseconds with three decimals ("-12.345")
 *   FRAMED a b c     consts[a], then a part holding consts[b] and the value as a varint (BEGIN, CONST b,
 *                    VARINT c, END after CONST a, in one operation: a protobuf field of a small message
 *                    that ends in an integer)
 *   SPAN a b         column a's value less column b's (int64, wrapping) as MICROS writes it
 *   LOW c k          the value's low k bits (1 <= k <= 63) as DEC writes it
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../decimal.h"

enum {
    OP_CONST = 1,
    OP_VARINT,
    OP_FIXED64,
    OP_TABLE,
    OP_BEGIN,
    OP_END,
    OP_SKIPZ,
    OP_DEC,
    OP_MICROS,
    OP_FRAMED,
    OP_SPAN,
    OP_LOW,
    OP_RET, /* a template's end: only in the copy the rows run (Job.code), never in a program given */
    /* only in that copy too: a CONST followed by the operation named, both done by one (its words are kept
     * after the CONST's: a SKIPZ that skips the CONST alone lands on them) */
    OP_CONST_VARINT,
    OP_CONST_DEC,
    OP_CONST_MICROS,
    OP_CONST_SPAN,
    OP_CONST_TABLE
};
#define MAX_DEPTH 32

typedef struct {
    const uint8_t *p;
    Py_ssize_t len;
} Piece;

typedef struct {
    Piece *items;
    Py_ssize_t len;
    uint8_t *arena; /* the entries' bytes, each followed by PAD zero bytes */
} Table;

static size_t varint_at(uint8_t *at, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        at[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    at[n++] = (uint8_t)v;
    return n;
}

static size_t varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* The decimal digits of v (npu_trace/decimal.h): their count */
static size_t decimal_at(uint8_t *at, uint64_t v)
{
    int n = decimal_digits(v);
    decimal_write((char *)at, v, n);
    return (size_t)n;
}

static uint64_t magnitude(int64_t v)
{
    return v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
}

/* A constant or a table entry copied: a short one as 16 or 32 bytes at once, a fixed size that compiles to a
 * move or two (each lies in an arena with PAD bytes after it, and the output has PAD bytes of room past every
 * row's bound). */
#define PAD 32
static inline size_t copy(uint8_t *to, const uint8_t *from, size_t len)
{
    if (len <= 16)
        memcpy(to, from, 16);
    else if (len <= PAD)
        memcpy(to, from, PAD);
    else
        memcpy(to, from, len);
    return len;
}

static size_t fixed64_at(uint8_t *at, uint64_t u)
{
    for (int b = 0; b < 8; b++)
        at[b] = (uint8_t)(u >> (8 * b));
    return 8;
}

/* A signed value in decimal. */
static size_t signed_at(uint8_t *at, int64_t v)
{
    size_t k = v < 0;
    at[0] = '-';
    return k + decimal_at(at + k, magnitude(v));
}

/* A signed count of nanoseconds as microseconds with three decimals ("-12.345"). */
static size_t micros_at(uint8_t *at, int64_t v)
{
    size_t k = v < 0;
    uint64_t m = magnitude(v), frac = m % 1000;
    at[0] = '-';
    k += decimal_at(at + k, m / 1000);
    at[k] = '.';
    at[k + 1] = (uint8_t)('0' + frac / 100);
    memcpy(at + k + 2, DECIMAL_PAIRS + 2 * (frac % 100), 2);
    return k + 4;
}

/* A part ends: its length goes in the byte kept in front of it when it opened (its bytes move up when the
 * length takes more: room was reserved). */
static size_t close_part(uint8_t *buf, size_t start, size_t pos)
{
    size_t len = pos - start - 1, size = varint_size(len);
    if (size == 1) {
        buf[start] = (uint8_t)len;
        return pos;
    }
    memmove(buf + start + size, buf + start + 1, len);
    varint_at(buf + start, len);
    return pos + size - 1;
}

static int operands(int op)
{
    switch (op) {
    case OP_BEGIN:
    case OP_END:
        return 0;
    case OP_TABLE:
    case OP_SKIPZ:
    case OP_SPAN:
    case OP_LOW:
        return 2;
    case OP_FRAMED:
        return 3;
    case OP_CONST:
    case OP_VARINT:
    case OP_FIXED64:
    case OP_DEC:
    case OP_MICROS:
        return 1;
    default:
        return -1;
    }
}

typedef struct {
    const int32_t *prog, *starts, *which;
    int32_t *code; /* the templates run: prog's words, each SKIPZ's count of operations made the words they take,
                    * each template followed by OP_RET (template t from code_at(j, t)) */
    const int64_t *cols;
    Py_ssize_t n, ncols, ntemplates;
    Table consts;
    Table *tables;
    size_t *bound; /* per template: the most bytes a row can take */
} Job;

/* Template t in j->code: where prog has it, after the OP_RET of each template before it. */
static inline int32_t *code_at(const Job *j, Py_ssize_t t)
{
    return j->code + j->starts[t] + t;
}

/* Row i written at buf + pos (room for its template's bound): the position after it, or 0 with *failed set
 * (2: a value out of its table, 3: BEGIN and END that do not match). The operations are dispatched by
 * computed goto (GNU C): each jumps to the next from its own end, a branch of its own that the processor
 * predicts from that operation's successors, where a switch has one jump for all (a block's rows change
 * templates from row to row). Measured on a block of the 2 M-event recording, 35 k rows: 97-100 -> 67-70 ns
 * a row to Perfetto, 96-100 -> 83-87 to Chrome JSON. Each template in j->code ends with OP_RET. */
static size_t row(const Job *j, Py_ssize_t i, uint8_t *buf, size_t pos, int *failed)
{
    static const void *const at_op[] = {
        [OP_CONST] = &&op_const, [OP_VARINT] = &&op_varint, [OP_FIXED64] = &&op_fixed64, [OP_TABLE] = &&op_table,
        [OP_BEGIN] = &&op_begin, [OP_END] = &&op_end,         [OP_SKIPZ] = &&op_skipz,     [OP_DEC] = &&op_dec,
        [OP_MICROS] = &&op_micros, [OP_FRAMED] = &&op_framed, [OP_SPAN] = &&op_span,       [OP_LOW] = &&op_low,
        [OP_RET] = &&op_ret,     [OP_CONST_VARINT] = &&op_const_varint, [OP_CONST_DEC] = &&op_const_dec,
        [OP_CONST_MICROS] = &&op_const_micros, [OP_CONST_SPAN] = &&op_const_span,
        [OP_CONST_TABLE] = &&op_const_table,
    };
    const int32_t *w = code_at(j, j->which[i]);
    const int64_t *row_values = j->cols + i * j->ncols;
    size_t open[MAX_DEPTH];
    int depth = 0;
#define NEXT goto *at_op[*w++]
    NEXT;
op_const: {
    Piece c = j->consts.items[*w++];
    pos += copy(buf + pos, c.p, (size_t)c.len);
    NEXT;
}
op_begin:
    if (depth == MAX_DEPTH) {
        *failed = 3;
        return 0;
    }
    open[depth++] = pos++;
    NEXT;
op_end:
    if (depth == 0) {
        *failed = 3;
        return 0;
    }
    pos = close_part(buf, open[--depth], pos);
    NEXT;
op_table: {
    int64_t v = row_values[w[0]];
    Table tab = j->tables[w[1]];
    w += 2;
    if (v >= tab.len) {
        *failed = 2;
        return 0;
    }
    if (v >= 0)
        pos += copy(buf + pos, tab.items[v].p, (size_t)tab.items[v].len);
    NEXT;
}
op_framed: {
    Piece tag = j->consts.items[w[0]], body = j->consts.items[w[1]];
    uint64_t v = (uint64_t)row_values[w[2]];
    w += 3;
    pos += copy(buf + pos, tag.p, (size_t)tag.len);
    pos += varint_at(buf + pos, (uint64_t)body.len + varint_size(v));
    pos += copy(buf + pos, body.p, (size_t)body.len);
    pos += varint_at(buf + pos, v);
    NEXT;
}
op_varint:
    pos += varint_at(buf + pos, (uint64_t)row_values[*w++]);
    NEXT;
op_fixed64:
    pos += fixed64_at(buf + pos, (uint64_t)row_values[*w++]);
    NEXT;
op_dec:
    pos += signed_at(buf + pos, row_values[*w++]);
    NEXT;
op_micros:
    pos += micros_at(buf + pos, row_values[*w++]);
    NEXT;
op_span:
    pos += micros_at(buf + pos, (int64_t)((uint64_t)row_values[w[0]] - (uint64_t)row_values[w[1]]));
    w += 2;
    NEXT;
op_low:
    pos += signed_at(buf + pos, (int64_t)((uint64_t)row_values[w[0]] & ((1ULL << w[1]) - 1)));
    w += 2;
    NEXT;
/* a CONST and the operation after it: the constant (w[0]), then, past the operation's own code (w[1]), a direct
 * jump to its handler, which reads its operands from w */
#define CONST_THEN(op)                                                                                             \
    pos += copy(buf + pos, j->consts.items[w[0]].p, (size_t)j->consts.items[w[0]].len);                           \
    w += 2;                                                                                                        \
    goto op
op_const_varint:
    CONST_THEN(op_varint);
op_const_dec:
    CONST_THEN(op_dec);
op_const_micros:
    CONST_THEN(op_micros);
op_const_span:
    CONST_THEN(op_span);
op_const_table:
    CONST_THEN(op_table);
#undef CONST_THEN
op_skipz: /* its second operand: the words the skipped operations take (see skip_words) */
    w += row_values[w[0]] == 0 ? 2 + w[1] : 2;
    NEXT;
op_ret:
#undef NEXT
    if (depth) {
        *failed = 3;
        return 0;
    }
    return pos;
}

/* ---- checking what the call was given, with the GIL -------------------------------------------------- */
static Py_ssize_t longest(Table tab)
{
    Py_ssize_t most = 0;
    for (Py_ssize_t k = 0; k < tab.len; k++)
        most = tab.items[k].len > most ? tab.items[k].len : most;
    return most;
}

/* The words taken by the `skip` operations from `w` (those before `end`: a template's operations are checked
 * first), so that a row skips them in one step. */
static int32_t skip_words(const int32_t *w, const int32_t *end, int32_t skip)
{
    const int32_t *from = w;
    for (; skip > 0 && w < end; skip--)
        w += 1 + operands(*w);
    return (int32_t)(w - from);
}

/* The operation a CONST followed by `op` is run as (OP_CONST when none does both). */
static int32_t fused(int32_t op)
{
    switch (op) {
    case OP_VARINT:
        return OP_CONST_VARINT;
    case OP_DEC:
        return OP_CONST_DEC;
    case OP_MICROS:
        return OP_CONST_MICROS;
    case OP_SPAN:
        return OP_CONST_SPAN;
    case OP_TABLE:
        return OP_CONST_TABLE;
    default:
        return OP_CONST;
    }
}

/* Checks template t's operations and operands; sets its bound (the most bytes a row of it takes) and the words
 * each SKIPZ skips (in j->code, a copy of prog). */
static int check_template(Job *j, Py_ssize_t ntables, Py_ssize_t nconsts, int t)
{
    const int32_t *w = j->prog + j->starts[t], *end = j->prog + j->starts[t + 1];
    size_t bound = 0;
    while (w < end) {
        int op = *w++, k = operands(op);
        if (k < 0 || w + k > end)
            return 0;
        if ((op == OP_CONST || op == OP_FRAMED) && (w[0] < 0 || w[0] >= nconsts))
            return 0;
        if (op == OP_FRAMED && (w[1] < 0 || w[1] >= nconsts || w[2] < 0 || w[2] >= j->ncols))
            return 0;
        if (op != OP_CONST && op != OP_FRAMED && k && (w[0] < 0 || w[0] >= j->ncols))
            return 0;
        if (op == OP_TABLE && (w[1] < 0 || w[1] >= ntables))
            return 0;
        if (op == OP_SKIPZ && w[1] < 0)
            return 0;
        if ((op == OP_SPAN && (w[1] < 0 || w[1] >= j->ncols)) || (op == OP_LOW && (w[1] < 1 || w[1] > 63)))
            return 0;
        if (op == OP_CONST)
            bound += (size_t)j->consts.items[w[0]].len;
        else if (op == OP_FRAMED)
            bound += (size_t)(j->consts.items[w[0]].len + j->consts.items[w[1]].len) + 32;
        else if (op == OP_TABLE)
            bound += (size_t)longest(j->tables[w[1]]);
        else if (op != OP_END && op != OP_SKIPZ)
            bound += 32; /* a number, or the length in front of a part */
        w += k;
    }
    j->bound[t] = bound;
    for (w = j->prog + j->starts[t]; w < end; w += 1 + operands(*w)) {
        int32_t *at = code_at(j, t) + (w - j->prog - j->starts[t]);
        if (*w == OP_SKIPZ)
            at[2] = skip_words(w + 3, end, w[2]);
        else if (*w == OP_CONST && w + 2 < end)
            at[0] = fused(w[2]);
    }
    return 1;
}

/* A tuple of bytes as pieces in an arena of their own (`t`): each entry's bytes, then PAD zero bytes. */
static int pieces_of(PyObject *tuple, Table *t)
{
    size_t size = 0;
    if (!PyTuple_Check(tuple)) {
        PyErr_SetString(PyExc_TypeError, "consts and table entries must be tuples of bytes");
        return 0;
    }
    t->len = PyTuple_GET_SIZE(tuple);
    for (Py_ssize_t k = 0; k < t->len; k++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, k);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "consts and table entries must be tuples of bytes");
            return 0;
        }
        size += (size_t)PyBytes_GET_SIZE(item) + PAD;
    }
    t->items = PyMem_Calloc((size_t)(t->len ? t->len : 1), sizeof(Piece));
    t->arena = PyMem_Calloc(size ? size : 1, 1);
    if (t->items == NULL || t->arena == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    for (Py_ssize_t k = 0, at = 0; k < t->len; k++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, k);
        Py_ssize_t n = PyBytes_GET_SIZE(item);
        memcpy(t->arena + at, PyBytes_AS_STRING(item), (size_t)n);
        t->items[k].p = t->arena + at;
        t->items[k].len = n;
        at += n + PAD;
    }
    return 1;
}

static int check_sizes(Py_buffer *prog, Py_buffer *starts, Py_buffer *which, Py_buffer *cols, Job *j)
{
    if (prog->len % 4 || starts->len % 4 || which->len % 4 || cols->len % 8 || starts->len < 4) {
        PyErr_SetString(PyExc_ValueError, "prog, starts and which are int32, cols int64");
        return 0;
    }
    j->ntemplates = starts->len / 4 - 1;
    j->n = which->len / 4;
    if (j->ncols < 0 || (j->n && j->ncols > cols->len / 8 / j->n) || cols->len / 8 != j->ncols * j->n) {
        PyErr_SetString(PyExc_ValueError, "cols must hold ncols columns of one value per row");
        return 0;
    }
    for (Py_ssize_t t = 0; t <= j->ntemplates; t++) {
        if (j->starts[t] < 0 || j->starts[t] > prog->len / 4 || (t && j->starts[t] < j->starts[t - 1])) {
            PyErr_SetString(PyExc_ValueError, "starts must rise within prog");
            return 0;
        }
    }
    for (Py_ssize_t i = 0; i < j->n; i++) {
        if (j->which[i] < 0 || j->which[i] >= j->ntemplates) {
            PyErr_SetString(PyExc_ValueError, "a row names a template that does not exist");
            return 0;
        }
    }
    return 1;
}

/* Every row written into `out` from `at` (a bytearray is grown to the rows' bound first; another buffer too
 * small for it: nothing written, minus the size needed): where the bytes end. */
static PyObject *run(Job *j, PyObject *out, Py_ssize_t at)
{
    size_t need = (size_t)at, pos = (size_t)at;
    int failed = 0;
    Py_buffer view = {0};
    uint8_t *buf;
    for (Py_ssize_t i = 0; i < j->n; i++)
        need += j->bound[j->which[i]];
    need += PAD; /* a short copy writes PAD bytes */
    if (PyByteArray_Check(out)) {
        if ((Py_ssize_t)need > PyByteArray_GET_SIZE(out) && PyByteArray_Resize(out, (Py_ssize_t)need) < 0)
            return NULL;
        buf = (uint8_t *)PyByteArray_AS_STRING(out);
    } else {
        if (PyObject_GetBuffer(out, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
            return NULL;
        if ((Py_ssize_t)need > view.len) {
            PyBuffer_Release(&view);
            return PyLong_FromSsize_t(-(Py_ssize_t)need);
        }
        buf = (uint8_t *)view.buf;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < j->n && !failed; i++)
        pos = row(j, i, buf, pos, &failed);
    Py_END_ALLOW_THREADS
    if (view.obj != NULL)
        PyBuffer_Release(&view);
    if (failed == 2)
        PyErr_SetString(PyExc_ValueError, "a value is out of its table");
    else if (failed == 3)
        PyErr_SetString(PyExc_ValueError, "a template's BEGIN and END do not match");
    return failed ? NULL : PyLong_FromSize_t(pos);
}

static PyObject *py_assemble(PyObject *self, PyObject *args)
{
    Py_buffer prog, starts, which, cols;
    PyObject *consts, *tables, *out, *result = NULL;
    Job j = {0};
    Py_ssize_t nconsts = 0, ntables = 0, done = 0, at = 0;
    if (!PyArg_ParseTuple(args, "y*y*y*y*nOOO|n", &prog, &starts, &which, &cols, &j.ncols, &consts, &tables, &out,
                          &at))
        return NULL;
    j.prog = prog.buf, j.starts = starts.buf, j.which = which.buf, j.cols = cols.buf;
    if (at < 0) {
        PyErr_SetString(PyExc_ValueError, "at must not be negative");
        goto out;
    }
    if (!check_sizes(&prog, &starts, &which, &cols, &j) || !pieces_of(consts, &j.consts))
        goto out;
    nconsts = j.consts.len;
    if (!PyTuple_Check(tables)) {
        PyErr_SetString(PyExc_TypeError, "tables must be a tuple of tuples of bytes");
        goto out;
    }
    ntables = PyTuple_GET_SIZE(tables);
    j.tables = PyMem_Calloc((size_t)(ntables ? ntables : 1), sizeof(Table));
    if (j.tables == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (; done < ntables; done++) {
        if (!pieces_of(PyTuple_GET_ITEM(tables, done), &j.tables[done])) {
            done++;
            goto out;
        }
    }
    j.bound = PyMem_Calloc((size_t)(j.ntemplates ? j.ntemplates : 1), sizeof(size_t));
    j.code = PyMem_Malloc((size_t)prog.len + 4 * (size_t)(j.ntemplates + 1));
    if (j.bound == NULL || j.code == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t t = 0; t < j.ntemplates; t++) { /* each template, then OP_RET */
        Py_ssize_t words = j.starts[t + 1] - j.starts[t];
        memcpy(code_at(&j, t), j.prog + j.starts[t], 4 * (size_t)words);
        code_at(&j, t)[words] = OP_RET;
    }
    for (Py_ssize_t i = 0; i < j.n; i++)
        j.bound[j.which[i]] = 1; /* the templates the rows use: only those are checked */
    for (Py_ssize_t t = 0; t < j.ntemplates; t++) {
        if (j.bound[t] && !check_template(&j, ntables, nconsts, (int)t)) {
            PyErr_Format(PyExc_ValueError, "template %zd is malformed", t);
            goto out;
        }
    }
    result = run(&j, out, at);
out:
    for (Py_ssize_t k = 0; j.tables && k < done; k++) {
        PyMem_Free(j.tables[k].items);
        PyMem_Free(j.tables[k].arena);
    }
    PyMem_Free(j.tables);
    PyMem_Free(j.consts.items);
    PyMem_Free(j.consts.arena);
    PyMem_Free(j.bound);
    PyMem_Free(j.code);
    PyBuffer_Release(&prog);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&which);
    PyBuffer_Release(&cols);
    return result;
}

static PyMethodDef methods[] = {
    {"assemble", py_assemble, METH_VARARGS, "Rows of bytes laid out by templates (see npu_trace.export.wire)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_wire", "The compiled byte assembler (npu_trace.export.wire).", -1, methods, NULL, NULL,
    NULL, NULL,
};

PyMODINIT_FUNC PyInit__wire(void)
{
    return PyModule_Create(&module);
}

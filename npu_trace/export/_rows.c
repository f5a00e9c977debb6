/* The pieces' rows of npu_trace.export.rows, compiled: a part's columns written straight into their rows of
 * the block's key-ordered matrix, in one call (no matrix of the part's own, no scatter of its rows after).
 *
 * rows.py holds the rules and the pure-Python twin, key_ordered_py, whose matrix is identical.
 *
 * fill(out, width, where, cols) -> None
 *   out    int64, rows of `width` values, row after row (written in place)
 *   where  int64, n: the row of `out` each of the part's n pieces goes to
 *   cols   a tuple of at most `width` columns, each an int (the same in every row) or n int64 values;
 *          row where[i] gets column c's value of piece i at c, then zeros up to `width`
 * Every operand is checked before anything is written (a row out of `out`, a column of another length or
 * too many columns is a ValueError).
 *
 * dense(values, low, span, codes, firsts) -> the count of distinct values
 *   values  int64, n, each in [low, low + span)
 *   codes   int64, n: written, the rank of each value among the distinct values (in value order)
 *   firsts  int64, n: its start written, the first row of each distinct value (by rank)
 * The keys of npu_trace.export.pieces.factorize as group numbers, through a table over their range (rows.py
 * holds the numpy twin, dense_py). A value outside the range is a ValueError (nothing is written).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const int64_t *values; /* NULL: the constant */
    int64_t constant;
} Column;

static int columns(PyObject *cols, Py_ssize_t n, Column *out, Py_buffer *held, Py_ssize_t *nheld)
{
    Py_ssize_t count = PyTuple_GET_SIZE(cols);
    for (Py_ssize_t c = 0; c < count; c++) {
        PyObject *col = PyTuple_GET_ITEM(cols, c);
        out[c].values = NULL;
        if (PyLong_Check(col)) {
            out[c].constant = PyLong_AsLongLong(col);
            if (out[c].constant == -1 && PyErr_Occurred())
                return 0;
            continue;
        }
        if (PyObject_GetBuffer(col, &held[*nheld], PyBUF_C_CONTIGUOUS) < 0)
            return 0;
        Py_buffer *b = &held[(*nheld)++];
        if (b->len != n * 8) {
            PyErr_SetString(PyExc_ValueError, "a column's length is not the part's");
            return 0;
        }
        out[c].values = b->buf;
    }
    return 1;
}

static int rows_in(const int64_t *where, Py_ssize_t n, Py_ssize_t rows)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (where[i] < 0 || where[i] >= rows)
            return 0;
    return 1;
}

static void fill(int64_t *out, Py_ssize_t width, const int64_t *where, Py_ssize_t n, const Column *cols,
                 Py_ssize_t ncols)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t *row = out + where[i] * width;
        for (Py_ssize_t c = 0; c < ncols; c++)
            row[c] = cols[c].values != NULL ? cols[c].values[i] : cols[c].constant;
        memset(row + ncols, 0, (size_t)(width - ncols) * sizeof(int64_t));
    }
}

static PyObject *py_fill(PyObject *self, PyObject *args)
{
    Py_buffer out, where;
    Py_ssize_t width, nheld = 0;
    PyObject *cols;
    if (!PyArg_ParseTuple(args, "w*ny*O!", &out, &width, &where, &PyTuple_Type, &cols))
        return NULL;
    Py_ssize_t n = where.len / 8, ncols = PyTuple_GET_SIZE(cols);
    Column *parsed = PyMem_Calloc((size_t)ncols + 1, sizeof(Column));
    Py_buffer *held = PyMem_Calloc((size_t)ncols + 1, sizeof(Py_buffer));
    int ok = parsed != NULL && held != NULL;
    if (!ok)
        PyErr_NoMemory();
    if (ok && (width < 1 || width > PY_SSIZE_T_MAX / 8 || ncols > width || out.len % (width * 8) || where.len % 8)) {
        PyErr_SetString(PyExc_ValueError, "the rows' width, the columns or the arrays' sizes do not agree");
        ok = 0;
    }
    if (ok && !rows_in(where.buf, n, out.len / 8 / width)) {
        PyErr_SetString(PyExc_ValueError, "a piece's row is out of the rows");
        ok = 0;
    }
    if (ok)
        ok = columns(cols, n, parsed, held, &nheld);
    if (ok) {
        Py_BEGIN_ALLOW_THREADS /* the GIL released while the rows are laid out */
        fill(out.buf, width, where.buf, n, parsed, ncols);
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t k = 0; k < nheld; k++)
        PyBuffer_Release(&held[k]);
    PyMem_Free(held);
    PyMem_Free(parsed);
    PyBuffer_Release(&out);
    PyBuffer_Release(&where);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* The table over the range: the first row of each value present, then (in value order) its rank */
static Py_ssize_t ranks(const int64_t *v, Py_ssize_t n, int64_t low, int64_t *table, Py_ssize_t span,
                        int64_t *firsts)
{
    Py_ssize_t count = 0;
    for (Py_ssize_t d = 0; d < span; d++)
        table[d] = -1;
    for (Py_ssize_t i = n - 1; i >= 0; i--)
        table[(uint64_t)v[i] - (uint64_t)low] = i;
    for (Py_ssize_t d = 0; d < span; d++) {
        if (table[d] >= 0) {
            firsts[count] = table[d];
            table[d] = count++;
        }
    }
    return count;
}

static PyObject *py_dense(PyObject *self, PyObject *args)
{
    Py_buffer values, codes, firsts;
    long long low;
    Py_ssize_t span, count = -1;
    if (!PyArg_ParseTuple(args, "y*Lnw*w*", &values, &low, &span, &codes, &firsts))
        return NULL;
    Py_ssize_t n = values.len / 8;
    const int64_t *v = values.buf;
    int ok = !(values.len % 8) && codes.len == values.len && firsts.len == values.len && span >= 1;
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok = v[i] >= low && (uint64_t)v[i] - (uint64_t)low < (uint64_t)span;
    int64_t *table = ok ? PyMem_Malloc((size_t)span * sizeof(int64_t)) : NULL;
    if (!ok)
        PyErr_SetString(PyExc_ValueError, "the values, their range or the outputs do not agree");
    else if (table == NULL)
        PyErr_NoMemory();
    else {
        int64_t *out = codes.buf;
        Py_BEGIN_ALLOW_THREADS
        count = ranks(v, n, (int64_t)low, table, span, firsts.buf);
        for (Py_ssize_t i = 0; i < n; i++)
            out[i] = table[(uint64_t)v[i] - (uint64_t)low];
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(table);
    PyBuffer_Release(&values);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&firsts);
    return count < 0 ? NULL : PyLong_FromSsize_t(count);
}

static PyMethodDef methods[] = {
    {"dense", py_dense, METH_VARARGS, "Integer keys as group numbers in value order (see npu_trace.export.rows)."},
    {"fill", py_fill, METH_VARARGS, "A part's columns written into their rows (see npu_trace.export.rows)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rows", "The pieces' rows, compiled (npu_trace.export.rows).", -1, methods, NULL, NULL,
    NULL, NULL,
};

PyMODINIT_FUNC PyInit__rows(void)
{
    return PyModule_Create(&module);
}

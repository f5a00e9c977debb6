/* The interrupt handlers of a block's lines, compiled (npu_trace.export.handlers): one pass in row order, the
 * depth of each line (checks) or a stack of each line's open entries (pairs).
 *
 * handlers.py holds the rules and the numpy twins, checks_py and pairs_py, whose results are identical.
 *
 * checks(line, entry, ok, named, held, max_open, bad, first_named, first_exit) -> None
 *   line     int64, n: each row's line, in [0, L)
 *   entry, ok, named  uint8, n (0 or 1): an entry (else an exit), a row that can be drawn, a row with a name
 *   held     int64, L: the entries each line holds open before the block
 *   bad      uint8, L, zeros: written 1 for a line with an exit while none is open, an entry while max_open
 *            are, or a row not ok
 *   first_named, first_exit  int64, L: written, each line's first named row and first exit (-1: none)
 *
 * pairs(line, entry, bad, held, entries, exits, held_exits, opened) -> (handlers, closing, left)
 *   over the lines not bad (each line's depth within [0, max_open]: checks): entries[k], exits[k] written, the
 *   k-th handler's rows, by exit; held_exits, the exits that close an entry held before the block; opened,
 *   the entries open at the end, ascending; each output int64 of n values, their counts returned
 * A line outside [0, L), arrays of other sizes, a held count below 0, or a line not bad whose depth passes what
 * its stack can hold (a line that checks() did not pass) is a ValueError (the outputs' contents are then
 * undefined).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int lines_in(const int64_t *line, Py_ssize_t n, Py_ssize_t lines)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (line[i] < 0 || line[i] >= lines)
            return 0;
    return 1;
}

static PyObject *py_checks(PyObject *self, PyObject *args)
{
    Py_buffer line, entry, ok, named, held, bad, first_named, first_exit;
    long long max_open;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*Lw*w*w*", &line, &entry, &ok, &named, &held, &max_open, &bad,
                          &first_named, &first_exit))
        return NULL;
    Py_ssize_t n = line.len / 8, lines = held.len / 8;
    int sizes = line.len % 8 == 0 && held.len % 8 == 0 && entry.len == n && ok.len == n && named.len == n
                && bad.len == lines && first_named.len == held.len && first_exit.len == held.len;
    int64_t *depth = NULL;
    PyObject *result = NULL;
    if (!sizes || !lines_in(line.buf, n, lines)) {
        PyErr_SetString(PyExc_ValueError, "the rows' arrays, or their lines, do not agree");
        goto done;
    }
    depth = PyMem_Malloc((size_t)lines * 8 + 8);
    if (depth == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(depth, held.buf, (size_t)held.len);
    {
        const int64_t *ln = line.buf;
        const uint8_t *en = entry.buf, *good = ok.buf, *name = named.buf;
        uint8_t *wrong = bad.buf;
        int64_t *fn = first_named.buf, *fx = first_exit.buf;
        for (Py_ssize_t l = 0; l < lines; l++)
            fn[l] = fx[l] = -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t l = ln[i];
            if (!good[i])
                wrong[l] = 1;
            if (name[i] && fn[l] < 0)
                fn[l] = i;
            if (en[i]) {
                if (depth[l] >= max_open)
                    wrong[l] = 1;
                depth[l]++;
            } else {
                if (depth[l] <= 0)
                    wrong[l] = 1;
                if (fx[l] < 0)
                    fx[l] = i;
                depth[l]--;
            }
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyMem_Free(depth);
    PyBuffer_Release(&line);
    PyBuffer_Release(&entry);
    PyBuffer_Release(&ok);
    PyBuffer_Release(&named);
    PyBuffer_Release(&held);
    PyBuffer_Release(&bad);
    PyBuffer_Release(&first_named);
    PyBuffer_Release(&first_exit);
    return result;
}

static PyObject *py_pairs(PyObject *self, PyObject *args)
{
    Py_buffer line, entry, bad, held, entries, exits, held_exits, opened;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*w*w*w*", &line, &entry, &bad, &held, &entries, &exits, &held_exits,
                          &opened))
        return NULL;
    Py_ssize_t n = line.len / 8, lines = held.len / 8, found = 0, closing = 0, left = 0;
    int sizes = line.len % 8 == 0 && held.len % 8 == 0 && entry.len == n && bad.len == lines
                && entries.len == line.len && exits.len == line.len && held_exits.len == line.len
                && opened.len == line.len;
    const int64_t *ln = line.buf, *hold = held.buf;
    const uint8_t *en = entry.buf, *wrong = bad.buf;
    int64_t *top = NULL, *start = NULL, *stack = NULL, room = 0;
    uint8_t *open = NULL;
    PyObject *result = NULL;
    if (!sizes || !lines_in(ln, n, lines)) {
        PyErr_SetString(PyExc_ValueError, "the rows' arrays, or their lines, do not agree");
        goto done;
    }
    /* each good line's stack: its held entries (-1), then room for each of its entries */
    top = PyMem_Calloc((size_t)lines + 1, 8);
    start = PyMem_Calloc((size_t)lines + 1, 8);
    open = PyMem_Calloc((size_t)n + 1, 1);
    if (top == NULL || start == NULL || open == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (!wrong[ln[i]] && en[i])
            top[ln[i]]++; /* for now: the line's entries */
    for (Py_ssize_t l = 0; l < lines; l++) {
        if (hold[l] < 0 || hold[l] > (PY_SSIZE_T_MAX / 8 - 1) - room - top[l]) { /* the stack's size: no wrap */
            PyErr_SetString(PyExc_ValueError, "a line holds fewer than no entries, or more than memory");
            goto done;
        }
        int64_t size = wrong[l] ? 0 : hold[l] + top[l];
        start[l] = room;
        top[l] = room + (wrong[l] ? 0 : hold[l]);
        room += size;
    }
    stack = PyMem_Malloc((size_t)room * 8 + 8);
    if (stack == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t l = 0; l < lines; l++)
        for (int64_t k = start[l]; k < top[l]; k++)
            stack[k] = -1;
    {
        int64_t *pe = entries.buf, *px = exits.buf, *hx = held_exits.buf, *op = opened.buf;
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t l = ln[i];
            if (wrong[l])
                continue;
            if (en[i]) {
                stack[top[l]++] = i;
                open[i] = 1;
                continue;
            }
            if (top[l] <= start[l]) {
                PyErr_SetString(PyExc_ValueError, "an exit of a line that checks() did not pass");
                goto done;
            }
            int64_t e = stack[--top[l]];
            if (e < 0) {
                hx[closing++] = i;
            } else {
                open[e] = 0;
                pe[found] = e;
                px[found++] = i;
            }
        }
        for (Py_ssize_t i = 0; i < n; i++)
            if (open[i])
                op[left++] = i;
    }
    result = Py_BuildValue("nnn", found, closing, left);
done:
    PyMem_Free(top);
    PyMem_Free(start);
    PyMem_Free(stack);
    PyMem_Free(open);
    PyBuffer_Release(&line);
    PyBuffer_Release(&entry);
    PyBuffer_Release(&bad);
    PyBuffer_Release(&held);
    PyBuffer_Release(&entries);
    PyBuffer_Release(&exits);
    PyBuffer_Release(&held_exits);
    PyBuffer_Release(&opened);
    return result;
}

static PyMethodDef methods[] = {
    {"checks", py_checks, METH_VARARGS, "Each line's checks (see npu_trace.export.handlers)."},
    {"pairs", py_pairs, METH_VARARGS, "The handlers of the good lines (see npu_trace.export.handlers)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_handlers", "The interrupt handlers' pairing, compiled (npu_trace.export.handlers).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__handlers(void)
{
    return PyModule_Create(&module);
}

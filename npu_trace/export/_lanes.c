/* The lane placement of npu_trace.export.lanes, compiled: LanePacker.place_many's loop over one group's
 * slices, and add_runs. Each lane's roots (array('q') of begins and of ends, Lane's own) are copied out at the
 * start of a call, worked on as int64 values and written back at its end when they changed (a root kept as a
 * Python int cost a new int and its release each: most of the placement's time when they were lists).
 *
 * lanes.py holds the rules (Lane.fits, Lane.add, Lane.add_run, LanePacker.place) and the pure-Python twin,
 * LanePacker.place_many_py, whose lanes and lane numbers are identical.
 *
 * place_many(lanes, begins, ends, out, at, max_roots) -> int
 *   lanes      a list of Lane objects (`begins`, `ends`: arrays of int64, array('q'); `floor`, `last_end`: ints)
 *   begins     int64, n: the slices' begins;  ends: int64, n, in order
 *   out        int64, n: the lane number of each slice placed (written from `at` on)
 *   at         the first slice to place
 *   max_roots  the roots a lane remembers (MAX_ROOTS)
 * A slice that begins at or after every end before it (the lanes' and the group's slices') goes to the first
 * lane, a run of them at once (Lane.add_run); any other to the first lane it fits (Lane.fits, Lane.add).
 * Returns n once every slice is placed, or the first slice no lane fits: the caller adds a lane and calls
 * again from it. A lane whose roots are not arrays of int64 is a TypeError; of two lengths, a ValueError.
 *
 * add_runs(lanes, begins, ends, starts, stops, max_roots) -> None
 *   Lane.add_run of the slices starts[k] .. stops[k] on lanes[k] (a list of Lane objects, one per run), for
 *   each k in turn: the runs of many groups' first lanes at once (npu_trace.export.parts.place)
 *   starts, stops  int64, one of each per lane: each run holding a slice at least, within the arrays
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* A lane as the loops use it: its roots copied out of its arrays into memory of its own (at [head, n), room
 * up to cap), floor and last end; written back to the Lane object (`store`) when they changed. */
typedef struct {
    PyObject *lane; /* borrowed from the list of lanes */
    PyObject *begins, *ends; /* the lane's arrays (new references) */
    int64_t *b, *e;
    Py_ssize_t head, n, cap;
    int64_t floor, last_end;
    int changed;
} Lane;

static int as_i64(PyObject *o, int64_t *out)
{
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred())
        return 0;
    *out = (int64_t)v;
    return 1;
}

static PyObject *BEGINS, *ENDS, *FLOOR, *LAST_END, *FROMBYTES; /* the names used, made once */

static int attr_i64(PyObject *o, PyObject *name, int64_t *out)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return 0;
    int ok = as_i64(v, out);
    Py_DECREF(v);
    return ok;
}

/* The first position in [lo, hi) whose end is above x (bisect_right) */
static Py_ssize_t bisect_right(const int64_t *ends, Py_ssize_t lo, Py_ssize_t hi, int64_t x)
{
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (x < ends[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Room for one more root at n: the roots moved to the front when the forgotten ones take the room, the memory
 * grown when the roots kept do; 0: no memory */
static int room(Lane *l)
{
    if (l->n < l->cap)
        return 1;
    if (l->head > 0) {
        Py_ssize_t kept = l->n - l->head;
        memmove(l->b, l->b + l->head, (size_t)kept * 8);
        memmove(l->e, l->e + l->head, (size_t)kept * 8);
        l->n = kept;
        l->head = 0;
        return 1;
    }
    Py_ssize_t cap = 2 * l->cap + 16;
    int64_t *b = PyMem_Realloc(l->b, (size_t)cap * 8);
    if (b == NULL)
        return 0;
    l->b = b;
    int64_t *e = PyMem_Realloc(l->e, (size_t)cap * 8);
    if (e == NULL)
        return 0;
    l->e = e;
    l->cap = cap;
    return 1;
}

static int push(Lane *l, int64_t b, int64_t e)
{
    if (!room(l)) {
        PyErr_NoMemory();
        return 0;
    }
    l->b[l->n] = b;
    l->e[l->n] = e;
    l->n++;
    return 1;
}

/* Lane._forget: the roots past max_roots forgotten, the floor at the end of the last of them */
static void forget(Lane *l, int64_t last_end, Py_ssize_t max_roots)
{
    Py_ssize_t extra = l->n - l->head - max_roots;
    if (extra > 0) {
        l->floor = l->e[l->head + extra - 1];
        l->head += extra;
    }
    l->last_end = last_end;
    l->changed = 1;
}

/* Lane.fits */
static int fits(const Lane *l, int64_t b, int64_t e)
{
    if (e < l->last_end || b < l->floor)
        return 0;
    Py_ssize_t after = bisect_right(l->e, l->head, l->n, b);
    return after == l->n || l->b[after] > b;
}

/* Lane.add: the roots ending after b are nested in the new slice */
static int add(Lane *l, int64_t b, int64_t e, Py_ssize_t max_roots)
{
    l->n = bisect_right(l->e, l->head, l->n, b);
    if (!push(l, b, e))
        return 0;
    forget(l, e, max_roots);
    return 1;
}

/* Lane.add_run: slices [lo, hi) none of which nests another: the last max_roots + 1 kept */
static int add_run(Lane *l, const int64_t *b, const int64_t *e, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t max_roots)
{
    Py_ssize_t from = hi - lo > max_roots + 1 ? hi - (max_roots + 1) : lo;
    for (Py_ssize_t i = from; i < hi; i++)
        if (!push(l, b[i], e[i]))
            return 0;
    forget(l, e[hi - 1], max_roots);
    return 1;
}

/* One of a lane's arrays written anew from roots [head, n) */
static int write_back(PyObject *array, const int64_t *values, Py_ssize_t head, Py_ssize_t n)
{
    if (PySequence_DelSlice(array, 0, PY_SSIZE_T_MAX) < 0)
        return 0;
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)(values + head), (n - head) * 8);
    if (bytes == NULL)
        return 0;
    PyObject *got = PyObject_CallMethodOneArg(array, FROMBYTES, bytes);
    Py_DECREF(bytes);
    Py_XDECREF(got);
    return got != NULL;
}

/* The lanes' state set back on the Lane objects (their roots, floor, last_end) */
static int store(Lane *lanes, Py_ssize_t nl)
{
    for (Py_ssize_t k = 0; k < nl; k++) {
        Lane *l = &lanes[k];
        if (!l->changed)
            continue;
        if (!write_back(l->begins, l->b, l->head, l->n) || !write_back(l->ends, l->e, l->head, l->n))
            return 0;
        PyObject *floor = PyLong_FromLongLong(l->floor), *last = PyLong_FromLongLong(l->last_end);
        int ok = floor != NULL && last != NULL && PyObject_SetAttr(l->lane, FLOOR, floor) == 0
                 && PyObject_SetAttr(l->lane, LAST_END, last) == 0;
        Py_XDECREF(floor);
        Py_XDECREF(last);
        if (!ok)
            return 0;
    }
    return 1;
}

/* The values of one of a lane's arrays (int64: array('q')) copied into `to`, with room for room_after more: how
 * many, or -1 */
static Py_ssize_t read_array(PyObject *array, int64_t **to, Py_ssize_t room_after)
{
    Py_buffer view;
    if (PyObject_GetBuffer(array, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "a lane's roots are not arrays of int64");
        return -1;
    }
    Py_ssize_t n = view.len / 8;
    const char *format = view.format != NULL ? view.format : "";
    int ok = view.itemsize == 8 && (strcmp(format, "q") == 0 || strcmp(format, "l") == 0);
    if (!ok)
        PyErr_SetString(PyExc_TypeError, "a lane's roots are not arrays of int64");
    else {
        *to = PyMem_Malloc((size_t)(n + room_after) * 8);
        if (*to == NULL) {
            PyErr_NoMemory();
            ok = 0;
        } else
            memcpy(*to, view.buf, (size_t)n * 8);
    }
    PyBuffer_Release(&view);
    return ok ? n : -1;
}

/* A Lane object's state (its arrays held, new references; its roots copied) */
static int load_one(PyObject *lane, Lane *l, Py_ssize_t max_roots)
{
    l->lane = lane;
    l->begins = PyObject_GetAttr(l->lane, BEGINS);
    l->ends = PyObject_GetAttr(l->lane, ENDS);
    if (l->begins == NULL || l->ends == NULL)
        return 0;
    Py_ssize_t nb = read_array(l->begins, &l->b, max_roots + 2);
    if (nb < 0)
        return 0;
    Py_ssize_t ne = read_array(l->ends, &l->e, max_roots + 2);
    if (ne < 0)
        return 0;
    if (nb != ne) {
        PyErr_SetString(PyExc_ValueError, "a lane's begins and ends are not of one length");
        return 0;
    }
    l->head = 0;
    l->n = nb;
    l->cap = nb + max_roots + 2;
    return attr_i64(l->lane, FLOOR, &l->floor) && attr_i64(l->lane, LAST_END, &l->last_end);
}

static void release(Lane *lanes, Py_ssize_t nl)
{
    for (Py_ssize_t k = 0; lanes != NULL && k < nl; k++) {
        Py_XDECREF(lanes[k].begins);
        Py_XDECREF(lanes[k].ends);
        PyMem_Free(lanes[k].b);
        PyMem_Free(lanes[k].e);
    }
    PyMem_Free(lanes);
}

static int load(PyObject *list, Lane *lanes, Py_ssize_t nl, Py_ssize_t max_roots)
{
    for (Py_ssize_t k = 0; k < nl; k++)
        if (!load_one(PyList_GET_ITEM(list, k), &lanes[k], max_roots))
            return 0;
    return 1;
}

/* The slices from `at` on; -1 on an error */
static Py_ssize_t place(Lane *lanes, Py_ssize_t nl, const int64_t *b, const int64_t *e, int64_t *out, Py_ssize_t n,
                        Py_ssize_t at, Py_ssize_t max_roots)
{
    if (nl == 0)
        return at;
    int64_t before = lanes[0].last_end;
    for (Py_ssize_t k = 1; k < nl; k++)
        before = lanes[k].last_end > before ? lanes[k].last_end : before;
    Py_ssize_t i = at;
    while (i < n) {
        Py_ssize_t j = i;
        for (; j < n && b[j] >= before; j++) {
            out[j] = 0;
            before = e[j] > before ? e[j] : before;
        }
        if (j > i && !add_run(&lanes[0], b, e, i, j, max_roots))
            return -1;
        if (j == n)
            return n;
        Py_ssize_t k = 0;
        while (k < nl && !fits(&lanes[k], b[j], e[j]))
            k++;
        if (k == nl)
            return j;
        if (!add(&lanes[k], b[j], e[j], max_roots))
            return -1;
        out[j] = k;
        before = e[j] > before ? e[j] : before;
        i = j + 1;
    }
    return n;
}

/* One group's slices from `at` on, on the lanes of `list`: n, the slice no lane fits, or -1 on an error */
static Py_ssize_t one_group(PyObject *list, const int64_t *b, const int64_t *e, int64_t *out, Py_ssize_t n,
                            Py_ssize_t at, Py_ssize_t max_roots)
{
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "a group's lanes are not a list");
        return -1;
    }
    Py_ssize_t nl = PyList_GET_SIZE(list), got = -1;
    Lane *lanes = PyMem_Calloc((size_t)nl + 1, sizeof(Lane));
    if (lanes == NULL)
        PyErr_NoMemory();
    else if (load(list, lanes, nl, max_roots)) {
        got = place(lanes, nl, b, e, out, n, at, max_roots);
        if (got >= 0 && !store(lanes, nl))
            got = -1;
    }
    release(lanes, nl);
    return got;
}

static PyObject *py_place_many(PyObject *self, PyObject *args)
{
    PyObject *list;
    Py_buffer begins, ends, out;
    Py_ssize_t at, max_roots, got = -1;
    if (!PyArg_ParseTuple(args, "O!y*y*w*nn", &PyList_Type, &list, &begins, &ends, &out, &at, &max_roots))
        return NULL;
    Py_ssize_t n = begins.len / 8;
    if (begins.len % 8 || ends.len != begins.len || out.len != begins.len || at < 0 || at > n || max_roots < 1)
        PyErr_SetString(PyExc_ValueError, "the slices' arrays, `at` or max_roots do not agree");
    else
        got = one_group(list, begins.buf, ends.buf, out.buf, n, at, max_roots);
    PyBuffer_Release(&begins);
    PyBuffer_Release(&ends);
    PyBuffer_Release(&out);
    return got < 0 ? NULL : PyLong_FromSsize_t(got);
}

/* Runs of slices on their lanes, each lane loaded, given its run and stored in turn; 0 on an error */
static int runs(PyObject *list, const int64_t *b, const int64_t *e, const int64_t *starts, const int64_t *stops,
                Py_ssize_t max_roots)
{
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(list); k++) {
        Lane *lane = PyMem_Calloc(1, sizeof(Lane));
        if (lane == NULL) {
            PyErr_NoMemory();
            return 0;
        }
        int ok = load_one(PyList_GET_ITEM(list, k), lane, max_roots)
                 && add_run(lane, b, e, starts[k], stops[k], max_roots) && store(lane, 1);
        release(lane, 1);
        if (!ok)
            return 0;
    }
    return 1;
}

static int within(const int64_t *starts, const int64_t *stops, Py_ssize_t count, Py_ssize_t n)
{
    for (Py_ssize_t k = 0; k < count; k++)
        if (starts[k] < 0 || starts[k] >= stops[k] || stops[k] > n)
            return 0;
    return 1;
}

static PyObject *py_add_runs(PyObject *self, PyObject *args)
{
    PyObject *list;
    Py_buffer begins, ends, starts, stops;
    Py_ssize_t max_roots;
    int ok = 0;
    if (!PyArg_ParseTuple(args, "O!y*y*y*y*n", &PyList_Type, &list, &begins, &ends, &starts, &stops, &max_roots))
        return NULL;
    Py_ssize_t n = begins.len / 8, count = starts.len / 8;
    if (begins.len % 8 || ends.len != begins.len || starts.len % 8 || stops.len != starts.len
        || count != PyList_GET_SIZE(list) || max_roots < 1 || !within(starts.buf, stops.buf, count, n))
        PyErr_SetString(PyExc_ValueError, "the slices' arrays, the runs' bounds or max_roots do not agree");
    else
        ok = runs(list, begins.buf, ends.buf, starts.buf, stops.buf, max_roots);
    PyBuffer_Release(&begins);
    PyBuffer_Release(&ends);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&stops);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"place_many", py_place_many, METH_VARARGS, "A group's slices on its lanes (see npu_trace.export.lanes)."},
    {"add_runs", py_add_runs, METH_VARARGS, "Runs of slices on their lanes (see npu_trace.export.lanes)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_lanes", "The lane placement, compiled (npu_trace.export.lanes).", -1, methods, NULL,
    NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lanes(void)
{
    BEGINS = PyUnicode_InternFromString("begins");
    ENDS = PyUnicode_InternFromString("ends");
    FLOOR = PyUnicode_InternFromString("floor");
    LAST_END = PyUnicode_InternFromString("last_end");
    FROMBYTES = PyUnicode_InternFromString("frombytes");
    if (BEGINS == NULL || ENDS == NULL || FLOOR == NULL || LAST_END == NULL || FROMBYTES == NULL)
        return NULL;
    return PyModule_Create(&module);
}

/* The lane placement of npu_trace.export.lanes, compiled: LanePacker.place_many's loop over one group's
 * slices, on the lanes' own lists (no copy of them in or out: each lane's roots stay the Python lists the
 * one-by-one placement reads, changed in place).
 *
 * lanes.py holds the rules (Lane.fits, Lane.add, Lane.add_run, LanePacker.place) and the pure-Python twin,
 * LanePacker.place_many_py, whose lanes and lane numbers are identical.
 *
 * place_many(lanes, begins, ends, out, at, max_roots) -> int
 *   lanes      a list of Lane objects (`begins`, `ends`: lists of ints; `floor`, `last_end`: ints)
 *   begins     int64, n: the slices' begins;  ends: int64, n, in order
 *   out        int64, n: the lane number of each slice placed (written from `at` on)
 *   at         the first slice to place
 *   max_roots  the roots a lane remembers (MAX_ROOTS)
 * A slice that begins at or after every end before it (the lanes' and the group's slices') goes to the first
 * lane, a run of them at once (Lane.add_run); any other to the first lane it fits (Lane.fits, Lane.add).
 * Returns n once every slice is placed, or the first slice no lane fits: the caller adds a lane and calls
 * again from it. A lane's lists hold the int64 values they were given (a value of another type: TypeError).
 *
 * add_runs(lanes, begins, ends, starts, stops, max_roots) -> None
 *   Lane.add_run of the slices starts[k] .. stops[k] on lanes[k] (a list of Lane objects, one per run), for
 *   each k in turn: the runs of many groups' first lanes at once (npu_trace.export.parts.place)
 *   starts, stops  int64, one of each per lane: each run holding a slice at least, within the arrays
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define TRIM 1024 /* forgotten roots taken off a lane's lists at once */

typedef struct {
    PyObject *lane;    /* borrowed from the list of lanes */
    PyObject *begins;  /* the lane's lists (new references) */
    PyObject *ends;
    Py_ssize_t head;   /* the roots before it are forgotten (taken off the lists once, at the end of the call) */
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

static PyObject *BEGINS, *ENDS, *FLOOR, *LAST_END; /* the Lane's attributes' names, made once */

static int attr_i64(PyObject *o, PyObject *name, int64_t *out)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return 0;
    int ok = as_i64(v, out);
    Py_DECREF(v);
    return ok;
}

/* bisect_right(list[lo:], x): the first position from lo on whose value is above x */
static Py_ssize_t bisect_right(PyObject *list, Py_ssize_t lo, int64_t x, int *err)
{
    Py_ssize_t hi = PyList_GET_SIZE(list);
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        int64_t v;
        if (!as_i64(PyList_GET_ITEM(list, mid), &v)) {
            *err = 1;
            return 0;
        }
        if (x < v)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static int append(PyObject *list, int64_t v)
{
    PyObject *o = PyLong_FromLongLong(v);
    if (o == NULL)
        return 0;
    int rc = PyList_Append(list, o);
    Py_DECREF(o);
    return rc == 0;
}

/* The roots forgotten taken off the lists */
static int trim(Lane *l)
{
    if (l->head && (PyList_SetSlice(l->begins, 0, l->head, NULL) < 0 || PyList_SetSlice(l->ends, 0, l->head, NULL) < 0))
        return 0;
    l->head = 0;
    return 1;
}

/* Lane._forget: the roots past max_roots forgotten, the floor at the end of the last of them (taken off the
 * lists a thousand at a time: each time would move the roots kept each time) */
static int forget(Lane *l, int64_t last_end, Py_ssize_t max_roots)
{
    Py_ssize_t extra = PyList_GET_SIZE(l->ends) - l->head - max_roots;
    if (extra > 0) {
        if (!as_i64(PyList_GET_ITEM(l->ends, l->head + extra - 1), &l->floor))
            return 0;
        l->head += extra;
        if (l->head >= TRIM && !trim(l))
            return 0;
    }
    l->last_end = last_end;
    l->changed = 1;
    return 1;
}

/* Lane.fits: 1, 0, or -1 on an error */
static int fits(Lane *l, int64_t b, int64_t e)
{
    if (e < l->last_end || b < l->floor)
        return 0;
    int err = 0;
    Py_ssize_t after = bisect_right(l->ends, l->head, b, &err);
    if (err)
        return -1;
    if (after == PyList_GET_SIZE(l->ends))
        return 1;
    int64_t v;
    if (!as_i64(PyList_GET_ITEM(l->begins, after), &v))
        return -1;
    return v > b;
}

/* Lane.add: the roots ending after b are nested in the new slice */
static int add(Lane *l, int64_t b, int64_t e, Py_ssize_t max_roots)
{
    int err = 0;
    Py_ssize_t keep = bisect_right(l->ends, l->head, b, &err);
    if (err)
        return 0;
    Py_ssize_t n = PyList_GET_SIZE(l->ends);
    if (keep < n && (PyList_SetSlice(l->begins, keep, n, NULL) < 0 || PyList_SetSlice(l->ends, keep, n, NULL) < 0))
        return 0;
    return append(l->begins, b) && append(l->ends, e) && forget(l, e, max_roots);
}

/* Lane.add_run: slices [lo, hi) none of which nests another: the last max_roots + 1 kept */
static int add_run(Lane *l, const int64_t *b, const int64_t *e, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t max_roots)
{
    Py_ssize_t from = hi - lo > max_roots + 1 ? hi - (max_roots + 1) : lo;
    for (Py_ssize_t i = from; i < hi; i++)
        if (!append(l->begins, b[i]) || !append(l->ends, e[i]))
            return 0;
    return forget(l, e[hi - 1], max_roots);
}

/* The lanes' state set back on the Lane objects (the roots forgotten taken off, floor, last_end) */
static int store(Lane *lanes, Py_ssize_t nl)
{
    for (Py_ssize_t k = 0; k < nl; k++) {
        if (!lanes[k].changed)
            continue;
        if (!trim(&lanes[k]))
            return 0;
        PyObject *floor = PyLong_FromLongLong(lanes[k].floor), *last = PyLong_FromLongLong(lanes[k].last_end);
        int ok = floor != NULL && last != NULL && PyObject_SetAttr(lanes[k].lane, FLOOR, floor) == 0
                 && PyObject_SetAttr(lanes[k].lane, LAST_END, last) == 0;
        Py_XDECREF(floor);
        Py_XDECREF(last);
        if (!ok)
            return 0;
    }
    return 1;
}

/* A Lane object's state (its lists held, new references) */
static int load_one(PyObject *lane, Lane *l)
{
    l->lane = lane;
    l->begins = PyObject_GetAttr(l->lane, BEGINS);
    l->ends = PyObject_GetAttr(l->lane, ENDS);
    if (l->begins == NULL || l->ends == NULL)
        return 0;
    if (!PyList_CheckExact(l->begins) || !PyList_CheckExact(l->ends)) {
        PyErr_SetString(PyExc_TypeError, "a lane's roots are not lists");
        return 0;
    }
    return attr_i64(l->lane, FLOOR, &l->floor) && attr_i64(l->lane, LAST_END, &l->last_end);
}

static int load(PyObject *list, Lane *lanes, Py_ssize_t nl)
{
    for (Py_ssize_t k = 0; k < nl; k++)
        if (!load_one(PyList_GET_ITEM(list, k), &lanes[k]))
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
        for (; k < nl; k++) {
            int f = fits(&lanes[k], b[j], e[j]);
            if (f < 0)
                return -1;
            if (f)
                break;
        }
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
    else if (load(list, lanes, nl)) {
        got = place(lanes, nl, b, e, out, n, at, max_roots);
        if (got >= 0 && !store(lanes, nl))
            got = -1;
    }
    for (Py_ssize_t k = 0; lanes != NULL && k < nl; k++) {
        Py_XDECREF(lanes[k].begins);
        Py_XDECREF(lanes[k].ends);
    }
    PyMem_Free(lanes);
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
        Lane lane = {0};
        int ok = load_one(PyList_GET_ITEM(list, k), &lane)
                 && add_run(&lane, b, e, starts[k], stops[k], max_roots) && store(&lane, 1);
        Py_XDECREF(lane.begins);
        Py_XDECREF(lane.ends);
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
    if (BEGINS == NULL || ENDS == NULL || FLOOR == NULL || LAST_END == NULL)
        return NULL;
    return PyModule_Create(&module);
}

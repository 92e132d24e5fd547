"""[Vlasenko 2022], listing 1: uninitialized vector elements. vec_init(y, size - 2, 2) sets only y[0..7],
so the two CFs of vec_sum that need y[8] and y[9] never run and the program hangs.

    python examples/fragments/uninit_vector.py --trace-dir /tmp/t1 && planaria trace analyze /tmp/t1
"""
import planaria.fragments as fr


@fr.atomic
def set_(x: fr.Name, val: int):
    x.set(val)


@fr.sub
def vec_init(vec: fr.Name, size: int, val: int):
    for i in range(size):
        set_(vec[i], val)


@fr.sub
def vec_sum(v1: fr.Name, v2: fr.Name, size: int, result: fr.Name):
    for i in range(size):
        set_(result[i], v1[i] + v2[i])


@fr.sub
def main():
    x, y, size, s = fr.dfs("x y size sum")
    set_(size, 10)
    vec_init(x, size, 1)
    vec_init(y, size - 2, 2)
    vec_sum(x, y, size, s)


if __name__ == "__main__":
    import sys
    trace_dir = sys.argv[sys.argv.index("--trace-dir") + 1] if "--trace-dir" in sys.argv else None
    res = fr.run(main, trace_dir=trace_dir)
    print(f"status {res.status}")

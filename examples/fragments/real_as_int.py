"""[Vlasenko 2022], listing 3: a real used as an int. set_real fixes the type of x to float;
print_int declares an int parameter, so its CF fails with a type mismatch naming both places.

    python examples/fragments/real_as_int.py --trace-dir /tmp/t3 && planaria trace analyze /tmp/t3
"""
import planaria.fragments as fr


@fr.atomic
def set_real(x: fr.Name, v: float):
    x.set(v)


@fr.atomic
def print_int(v: int):
    print("%d" % v, flush=True)


@fr.sub
def main():
    x = fr.df("x")
    set_real(x, 3.14)
    print_int(x)


if __name__ == "__main__":
    import sys
    trace_dir = sys.argv[sys.argv.index("--trace-dir") + 1] if "--trace-dir" in sys.argv else None
    res = fr.run(main, trace_dir=trace_dir)
    print(f"status {res.status}")

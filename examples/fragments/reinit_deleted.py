"""[Vlasenko 2022], listing 2: re-initialization of a deleted DF. print_(x) carries the recommendation
"delete x afterwards"; wait_and_set(x, 1, 0.3) then assigns x again. The runtime no longer knows x,
so it does not notice; the trace analyzer lists x as initialized twice, with both writers.

    python examples/fragments/reinit_deleted.py --trace-dir /tmp/t2 && planaria trace analyze /tmp/t2
"""
import time

import planaria.fragments as fr


@fr.atomic
def set_(x: fr.Name, val: int):
    x.set(val)


@fr.atomic
def wait_and_set(x: fr.Name, val: int, delay: float):
    time.sleep(delay)
    x.set(val)


@fr.atomic
def print_(v: int):
    print(v, flush=True)


@fr.sub
def main():
    x = fr.df("x")
    set_(x, 0)
    print_(x).delete(x)
    wait_and_set(x, 1, 0.3)


if __name__ == "__main__":
    import sys
    trace_dir = sys.argv[sys.argv.index("--trace-dir") + 1] if "--trace-dir" in sys.argv else None
    res = fr.run(main, trace_dir=trace_dir)
    print(f"status {res.status}")

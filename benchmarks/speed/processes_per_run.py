"""One run's step on two cores: one process on two threads, or two processes on one thread
each, every process stepping its half of the batch's rows.

    python benchmarks/speed/processes_per_run.py [--task fuzzy-logic] [--attention softmax]
        [--reduce gloo|none] [--steps 40] [--rounds 10] [--out FILE.json]

A single run's step leaves a core waiting while the main thread does the step's fixed host
work (``thread_shares.py``), and OpenMP splits each parallel region in fixed halves, so a
core that runs slower for a while holds the other up. Data parallelism over processes
(what ``torchrun`` does) gives each core a whole step of its own on half the rows instead:
its host work then runs beside the other's, at the price of a gradient all-reduce each
step. Is that faster for the command's fused-compile step?

Three persistent worker processes (spawned, so no thread pool is inherited): one on two
OpenMP threads stepping the task's batch, the command's step; two on one thread each, pinned
to cores 0 and 1, each drawing the batch and stepping its own block of rows
(:meth:`DistributedContext.rows`). With ``--reduce gloo`` the two join a gloo process group
and all-reduce their gradients, flattened into one tensor, before AdamW, as a data-parallel
run would (at the end the two replicas' parameters must be equal, else it fails); ``--reduce
none`` leaves that out (the replicas then drift apart, which leaves the time of a step
alike): the bound a cheaper all-reduce could reach. The two setups take turns of ``--steps``
steps (the first alternating, only one running at a time), the pair's turn lasting as long
as its slower process; each round prints both and their ratio, and the round trip of a
cache line between the two cores before and after it (``core_distance.py``), so that the
end gives the ratio's median over the rounds with the cores near and far apart too. A
diagnosis; the claim is the command's (``command_side_by_side.py``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
from multiprocessing.connection import Connection
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from latentlens.training import TrainConfig  # noqa: E402
from latentlens.training.distributed import DistributedContext  # noqa: E402
from speed.core_distance import FAR_NS, place_of, round_trip_ns  # noqa: E402

PAIR = 2


def all_reduced_step(trainer, rank: int) -> None:
    """Make ``trainer``'s step (fused-compile, traced) train on rank ``rank``'s block of
    rows of the batch it draws, with its gradients averaged over the process group before
    AdamW."""
    import torch.distributed as dist

    context = DistributedContext(rank, PAIR)
    trained = [p for p in trainer.model.parameters() if p.requires_grad]
    flat = torch.empty(sum(p.numel() for p in trained))

    def compute_step() -> torch.Tensor:
        draws = trainer.task.draw(trainer.train_cfg.batch_size, "train", trainer.data_generator)
        loss = trainer.traced(context.rows(draws))
        torch.cat([p.grad.reshape(-1) for p in trained], out=flat)
        dist.all_reduce(flat)
        flat.mul_(1 / PAIR)
        offset = 0
        for parameter in trained:
            parameter.grad.copy_(flat[offset : offset + parameter.numel()].view_as(parameter))
            offset += parameter.numel()
        if trainer.train_cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), trainer.train_cfg.grad_clip)
        trainer.optimizer_step()
        return loss

    trainer.compute_step = compute_step


def worker(
    pipe: Connection, task: str, attention: str, threads: int, rank: int | None, reduce: str,
    port: int,
) -> None:  # fmt: skip
    """Build a fused-compile trainer, warm it, then step ``n`` steps for each ``n`` the pipe
    sends (None: stop) and send back milliseconds a step. ``rank`` None: the whole batch
    on ``threads`` threads; else that rank's half, pinned to core ``rank``."""
    from speed.host_share import trainer_for
    from speed.traced_step import WARMUP_STEPS, milliseconds_a_step

    torch.set_num_threads(threads)
    if rank is not None:
        os.sched_setaffinity(0, {rank})
    trainer = trainer_for(task, attention, TrainConfig.for_task(task).batch_size)
    if rank is not None:
        if reduce == "gloo":
            import torch.distributed as dist

            address = f"tcp://127.0.0.1:{port}"
            dist.init_process_group("gloo", init_method=address, rank=rank, world_size=PAIR)
            all_reduced_step(trainer, rank)
        else:
            context = DistributedContext(rank, PAIR)
            traced = trainer.traced
            trainer.traced = lambda draws: traced(context.rows(draws))
    milliseconds_a_step(trainer, WARMUP_STEPS)
    pipe.send("ready")
    while (steps := pipe.recv()) is not None:
        pipe.send(milliseconds_a_step(trainer, steps))
    # as an array: a tensor would go through shared memory, gone once this process ends
    pipe.send(torch.cat([p.detach().reshape(-1) for p in trainer.model.parameters()]).numpy())


def answer(pipe: Connection) -> object:
    """A worker's next message; a one-line error where the worker has died."""
    try:
        return pipe.recv()
    except EOFError:
        raise SystemExit("error: a worker process stopped (see its error above)") from None


def take_turns(
    pipes: dict[str, list[Connection]], rounds: int, steps: int
) -> tuple[dict[str, list[float]], list[list[float]]]:
    """``rounds`` rounds of a turn of ``steps`` steps for each setup (the first
    alternating): each setup's milliseconds a step per round (a pair's: its slower
    process's), and each round's round trips between the cores before and after it
    (:mod:`speed.core_distance`; the workers idle then)."""
    times: dict[str, list[float]] = {name: [] for name in pipes}
    trips = []
    names = list(pipes)
    for index in range(rounds):
        before = round_trip_ns()
        for name in names if index % 2 == 0 else names[::-1]:
            for pipe in pipes[name]:
                pipe.send(steps)
            times[name].append(max(answer(pipe) for pipe in pipes[name]))
        trips.append([before, round_trip_ns()])
        one, two = times["one process"][-1], times["two processes"][-1]
        print(f"round trip {trips[-1][0]:4.0f} {trips[-1][1]:4.0f} ns   one process {one:7.2f} "
              f"ms   two processes {two:7.2f} ms   {one / two:.3f}x", flush=True)  # fmt: skip
    return times, trips


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="fuzzy-logic")
    parser.add_argument("--attention", default="softmax")
    parser.add_argument("--reduce", choices=("gloo", "none"), default="gloo")
    parser.add_argument("--steps", type=int, default=40, help="steps a turn")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--port", type=int, default=29533, help="the gloo group's TCP port")
    parser.add_argument("--out", type=Path, help="write the rounds and ratios here as JSON")
    args = parser.parse_args(argv)
    if len(os.sched_getaffinity(0)) < PAIR or not {0, 1} <= os.sched_getaffinity(0):
        raise SystemExit("processes_per_run.py needs cores 0 and 1; run it on them")
    spawn = mp.get_context("spawn")
    pipes: dict[str, list[Connection]] = {"one process": [], "two processes": []}
    workers = []
    for name, ranks, threads in (("one process", [None], 2), ("two processes", [0, 1], 1)):
        for rank in ranks:
            mine, theirs = spawn.Pipe()
            process = spawn.Process(
                target=worker,
                args=(theirs, args.task, args.attention, threads, rank, args.reduce, args.port),
            )
            process.start()
            workers.append(process)
            pipes[name].append(mine)
    for pipe in [*pipes["one process"], *pipes["two processes"]]:
        if answer(pipe) != "ready":
            raise SystemExit("a worker failed to start")
    rounds, trips = take_turns(pipes, args.rounds, args.steps)
    for pipe in [*pipes["one process"], *pipes["two processes"]]:
        pipe.send(None)
    first, second = (answer(pipe) for pipe in pipes["two processes"])
    answer(pipes["one process"][0])
    if args.reduce == "gloo" and not (first == second).all():  # the all-reduce's check
        raise SystemExit("the two processes' parameters differ after all-reduced steps")
    for process in workers:
        process.join()
    ratios = [a / b for a, b in zip(rounds["one process"], rounds["two processes"], strict=True)]
    faster = sum(ratio > 1 for ratio in ratios)
    print(f"{args.task} {args.attention}, all-reduce {args.reduce}: two processes at "
          f"{statistics.median(ratios):.3f}x [{min(ratios):.3f}-{max(ratios):.3f}] one "
          f"(median [range] of {args.rounds} rounds; faster in {faster})")  # fmt: skip
    for place in ("near", "far"):
        alike = [r for r, t in zip(ratios, trips, strict=True)
                 if place_of(t, FAR_NS) == place]  # fmt: skip
        if alike:
            print(f"  the cores {place} (both probes {'above' if place == 'far' else 'below'} "
                  f"{FAR_NS:.0f} ns): {statistics.median(alike):.3f}x, median of "
                  f"{len(alike)}")  # fmt: skip
    if args.out:
        result = {"task": args.task, "attention": args.attention, "reduce": args.reduce,
                  "steps_a_turn": args.steps, "rounds_ms": rounds, "ratios": ratios,
                  "round_trip_ns": trips}  # fmt: skip
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

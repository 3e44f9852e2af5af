"""Train a two-tower recommender with a large item-embedding table, sharded over parameter servers.

    python examples/recommender.py                                                  # one process
    tfdist launch --workers 2 --ps 2 -- python examples/recommender.py --backend parameter_server --shards 2
    horovodrun -np 2 -H localhost:2 python examples/recommender.py --backend horovod
    tfdist launch --workers 2 --ps 2 -- python examples/recommender.py --backend parameter_server \\
        --shards 2 --items 1M --embedding-dim 128       # 128M parameters: 512 MB + 512 MB of Adagrad slots

The model: a user tower (``Embedding(--users, D)`` then ``Dense(D)``) and an item tower
(``Embedding(--items, D)`` then ``Dense(D)``); the score of a (user, item) pair is the dot product
of the two towers, scaled and shifted by one ``Dense(1)``, trained as a click/no-click logit with binary cross-entropy and
Adagrad (the usual optimizer for asynchronous embedding training; docs/parameter-servers.md) with a
small initial accumulator: with Keras' default of 0.1 a rarely seen row, whose batch-mean gradient is
about 1e-4, moves by 3e-5 a step and the model stays at chance for many epochs. The
item table is the large variable: ``--items`` rows (``1M`` and ``2.5k`` are understood) of
``--embedding-dim`` floats; with the default 20,000 x 16 the example trains in seconds.

Hybrid data + model parallelism: with ``--backend parameter_server --shards N`` every variable, the
item table first, is split into N shards placed on different ps tasks (``make_strategy(...,
shards=N)``), so the table may be larger than one ps host's memory while the workers train on their
own data. **Sparse updates**: the towers read the tables with an ``Embedding`` lookup, whose gradient
is ``tf.IndexedSlices`` of the looked-up rows only, so a worker pulls and pushes only the rows of its
batch and Adagrad's sparse apply changes only those rows (and their slots); rows no batch touched keep
their initial values, which the run checks on a sample of them (``untouched_rows_unchanged``), beside
the class of the table's gradient on one batch (``table_gradient=IndexedSlices``). Under
Horovod the slices are allgathered, not densified.

Data: synthetic, generated here (no download): every user and every item has one of ``--topics``
hidden topics, items have a long-tailed popularity (a few are seen often, most rarely, as in a real
catalogue), and a pair is clicked when the topics agree (labels flipped with probability
``--noise``), half of the pairs clicked. The model never sees the topics: it must learn them into the
embeddings, so the test AUC above 0.5 (chance) and the test loss below ln 2 (a constant guess) show
that it learned.

``--export DIR`` exports the trained model for serving (``strategy.export``: written once by the
chief, the shards merged back into one table, verified in a fresh process; inputs ``user_id`` and
``item_id``, int64; output ``output_0``, the logit). The last line printed is the result (the chief's).
"""
from __future__ import annotations

import argparse
import math
import time

import tfdist  # before tensorflow

import numpy as np
import tensorflow as tf

from tfdist.advise import AdviseError, parse_count

TABLE = "item_embedding"  # the large variable's layer
SAMPLE_ROWS = 64  # untouched and touched rows compared before and after training
ADAGRAD_INITIAL_ACCUMULATOR = 1e-7  # not Keras' 0.1: see the module docstring
POPULARITY_EXPONENT = 1.1  # Zipf-like: item of popularity rank r is drawn with weight 1 / (r + 1) ** this


def count(text: str) -> int:
    """An argparse type: a whole count >= 1 such as ``20000``, ``20k`` or ``1M``."""
    try:
        return parse_count(text, field="")
    except AdviseError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole count >= 1; "
                                         "fix: pass a number with an optional k or M, e.g. 20000, 20k, 1M") from None


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 1; fix: pass e.g. 2")
    return value


def probability(text: str) -> float:
    """An argparse type: a number from 0 to 0.5 (a label-noise rate)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 0.5:
        raise argparse.ArgumentTypeError(f"{text!r} is not a probability from 0 to below 0.5; fix: pass e.g. 0.05")
    return value


def make_data(users: int, items: int, topics: int, examples: int, noise: float,
              seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``({"user_id", "item_id"}, clicked)`` for ``examples`` pairs, the same in every process (seeded);
    half clicked (before the ``noise`` flips); items drawn by long-tailed popularity within a topic."""
    world = np.random.default_rng(seed)  # the hidden truth: topics and popularity, shared by every split
    user_topic = world.integers(0, topics, size=users)
    item_topic = world.integers(0, topics, size=items)
    weight = 1.0 / (world.permutation(items) + 1.0) ** POPULARITY_EXPONENT
    rng = np.random.default_rng(seed + 1 + examples)  # this split's own pairs
    user = rng.integers(0, users, size=examples)
    clicked = rng.random(examples) < 0.5
    other = (user_topic[user] + rng.integers(1, topics, size=examples)) % topics  # another topic
    topic = np.where(clicked, user_topic[user], other)
    item = np.empty(examples, dtype=np.int64)
    for t in range(topics):
        pool = np.flatnonzero(item_topic == t)
        chosen = np.flatnonzero(topic == t)
        if len(chosen) == 0:
            continue
        if len(pool) == 0:  # a topic no item has (tiny catalogues): any item, not clicked
            item[chosen], clicked[chosen] = rng.integers(0, items, size=len(chosen)), False
            continue
        item[chosen] = rng.choice(pool, size=len(chosen), p=weight[pool] / weight[pool].sum())
    flip = rng.random(examples) < noise
    labels = (clicked ^ flip).astype("float32")[:, None]
    return {"user_id": user.astype("int64"), "item_id": item}, labels


def build_model(users: int, items: int, dim: int, seed: int = 0) -> tf.keras.Model:
    """The two towers and their dot product: a logit per (user, item) pair."""
    tf.keras.utils.set_random_seed(seed)
    user_id = tf.keras.Input((), dtype="int64", name="user_id")
    item_id = tf.keras.Input((), dtype="int64", name="item_id")
    user = tf.keras.layers.Embedding(users, dim, name="user_embedding")(user_id)
    user = tf.keras.layers.Dense(dim, name="user_tower")(user)
    item = tf.keras.layers.Embedding(items, dim, name=TABLE)(item_id)
    item = tf.keras.layers.Dense(dim, name="item_tower")(item)
    score = tf.keras.layers.Dot(axes=1, name="score")([user, item])
    logit = tf.keras.layers.Dense(1, name="logit")(score)
    return tf.keras.Model({"user_id": user_id, "item_id": item_id}, logit, name="two_tower")


def table_pieces(model: tf.keras.Model) -> list[tf.Variable]:
    """The item table's variables: its shards under ``shards=N``, else the one variable."""
    table = model.get_layer(TABLE).embeddings
    return list(getattr(table, "variables", [table]))


def table_gradient_kind(users: int, items: int, dim: int, x: dict[str, np.ndarray], y: np.ndarray) -> str:
    """The class of the item table's gradient on one batch (``IndexedSlices``: only the batch's rows),
    from a throwaway copy of the model built outside the strategy: a dense update whose other rows are
    zero would leave them unchanged too, so the row check alone could not tell."""
    model = build_model(users, items, dim)
    batch = {name: tf.constant(values[:8]) for name, values in x.items()}
    with tf.GradientTape() as tape:
        loss = tf.keras.losses.BinaryCrossentropy(from_logits=True)(y[:8], model(batch))
    return type(tape.gradient(loss, model.get_layer(TABLE).embeddings)).__name__


def read_rows(model: tf.keras.Model, ids: np.ndarray) -> np.ndarray:
    """Rows ``ids`` of the item table (sharded or not), read where the table lives."""
    return tf.nn.embedding_lookup(model.get_layer(TABLE).embeddings, tf.constant(ids, tf.int64)).numpy()


def sample_rows(items: int, touched: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Up to SAMPLE_ROWS ids no training pair uses and as many of the most used ones."""
    used = np.bincount(touched, minlength=items)
    untouched = np.flatnonzero(used == 0)
    untouched = np.random.default_rng(seed).permutation(untouched)[:SAMPLE_ROWS]
    return np.sort(untouched), np.argsort(-used, kind="stable")[:SAMPLE_ROWS]


class EpochLosses(tf.keras.callbacks.Callback):
    """Every epoch's training loss (epoch hooks only: parameter servers refuse batch hooks)."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.losses.append(float((logs or {})["loss"]))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", "--strategy", dest="backend", default="auto",
                        choices=tfdist.available_strategies(),
                        help="the backend (default: auto, chosen from the launcher's environment)")
    parser.add_argument("--shards", type=positive_int,
                        help="parameter_server: split every variable (the item table first) into this many "
                             "shards over the ps tasks (default: whole variables, each on one ps)")
    parser.add_argument("--users", type=count, default=1000, help="rows of the user table (default: 1000)")
    parser.add_argument("--items", type=count, default=20000,
                        help="rows of the item table, the large one (default: 20000; e.g. 1M for a big model)")
    parser.add_argument("--embedding-dim", type=positive_int, default=16, help="D (default: 16)")
    parser.add_argument("--topics", type=positive_int, default=8,
                        help="hidden topics of the data, at least 2 (default: 8)")
    parser.add_argument("--noise", type=probability, default=0.05, help="label-flip rate (default: 0.05)")
    parser.add_argument("--examples", type=count, default=32768, help="training pairs (default: 32768)")
    parser.add_argument("--test-examples", type=count, default=4096, help="test pairs (default: 4096)")
    parser.add_argument("--epochs", type=positive_int, default=2, help="(default: 2; more overfits the rare items)")
    parser.add_argument("--batch-size", type=positive_int, default=256, help="per worker (default: 256)")
    parser.add_argument("--lr", type=float, default=0.1, help="Adagrad's learning rate (default: 0.1)")
    parser.add_argument("--export", metavar="DIR",
                        help="export the trained model to DIR as a SavedModel for serving (replaces one there)")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked: a bad value exits 2 naming its flag and the fix."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.shards is not None and args.backend not in ("auto", "parameter_server"):
        parser.error(f"--shards splits variables over parameter servers; --backend {args.backend} has none; "
                     "fix: drop --shards, or use --backend parameter_server under "
                     "`tfdist launch --workers 2 --ps 2`")
    if args.topics < 2:
        parser.error(f"--topics {args.topics}: one topic leaves nothing to learn (every pair would match); "
                     "fix: pass 2 or more, e.g. 8")
    if not (math.isfinite(args.lr) and args.lr > 0):
        parser.error(f"--lr {args.lr!r} is not a positive learning rate; fix: pass e.g. 0.1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    shards = {} if args.shards is None else {"shards": args.shards}
    strategy = tfdist.make_strategy(args.backend, **tfdist.options_for(args.backend, {"parameter_server": shards}))
    if args.shards is not None and strategy.kind != "parameter_server":  # `auto` drops other backends' options
        build_parser().error(f"--shards {args.shards}: --backend {args.backend} picked {strategy.kind}, which has "
                             "no ps tasks; fix: drop --shards, or launch with ps tasks (`tfdist launch --workers 2 "
                             "--ps 2 -- python examples/recommender.py --shards 2`)")
    x, y = make_data(args.users, args.items, args.topics, args.examples, args.noise)
    x_test, y_test = make_data(args.users, args.items, args.topics, args.test_examples, args.noise)
    gradient_kind = table_gradient_kind(args.users, args.items, args.embedding_dim, x, y)
    with strategy.scope():
        model = build_model(args.users, args.items, args.embedding_dim)
        model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.Adagrad(
            args.lr, initial_accumulator_value=ADAGRAD_INITIAL_ACCUMULATOR)),
                      loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
                      metrics=[tf.keras.metrics.AUC(from_logits=True, name="auc"),
                               tf.keras.metrics.BinaryAccuracy(threshold=0.0, name="accuracy")])
    untouched, touched = sample_rows(args.items, x["item_id"])
    before = read_rows(model, np.concatenate([untouched, touched]))
    losses = EpochLosses()
    # Throughput alone: strategy.metrics' ParameterServerMetrics needs a model with one input.
    throughput = strategy.throughput(args.batch_size)
    start = time.perf_counter()
    strategy.fit(model, x, y, batch_size=args.batch_size, epochs=args.epochs, callbacks=[throughput, losses],
                 verbose=2)
    elapsed = time.perf_counter() - start
    results = strategy.evaluate(model, x_test, y_test, batch_size=args.batch_size, verbose=0, return_dict=True)
    after = read_rows(model, np.concatenate([untouched, touched]))
    changed = np.any(before != after, axis=1)
    pieces = table_pieces(model)
    exported = strategy.export(model, args.export, overwrite=True) if args.export else None
    if strategy.is_chief:
        rate = throughput.mean_examples_per_second  # the first epoch (tracing) left out when there are more
        print(f"RESULT strategy={strategy.kind} workers={strategy.num_workers} "
              f"ps={getattr(strategy, 'num_ps', 0)} params={model.count_params()} "
              f"table_rows={args.items} table_dim={args.embedding_dim} "
              f"table_bytes={args.items * args.embedding_dim * 4} table_shards={len(pieces)} "
              f"table_devices={','.join(v.device or 'local' for v in pieces)} "
              f"table_shard_rows={','.join(str(int(v.shape[0])) for v in pieces)} "
              f"first_loss={losses.losses[0]:.4f} last_loss={losses.losses[-1]:.4f} "
              f"chance_loss={math.log(2):.4f} test_loss={results['loss']:.4f} test_auc={results['auc']:.4f} "
              f"test_accuracy={results['accuracy']:.4f} "
              f"table_gradient={gradient_kind} "
              f"untouched_rows_unchanged={int((~changed[:len(untouched)]).sum())}/{len(untouched)} "
              f"touched_rows_changed={int(changed[len(untouched):].sum())}/{len(touched)} "
              f"examples_per_second={rate:.0f} train_seconds={elapsed:.1f}"
              + (f" export={exported}" if exported else ""), flush=True)


if __name__ == "__main__":
    main()

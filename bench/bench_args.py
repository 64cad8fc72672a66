"""The options the games-per-second benches share: --games, --repeat and --quick."""

from __future__ import annotations

import argparse


def games_parser(doc: str, games: int, repeat: int, quick: tuple[int, int]) -> argparse.ArgumentParser:
    """A parser with --games, --repeat (each cell the best of that many runs) and --quick
    (``quick`` = games and repeats); the caller adds its own options, then calls ``parse``."""
    parser = argparse.ArgumentParser(description=doc.strip().split("\n")[0])
    parser.add_argument("--games", type=int, default=games)
    parser.add_argument("--repeat", type=int, default=repeat, help="runs of each cell; the best is reported")
    parser.add_argument("--quick", action="store_true", help=f"{quick[0]} games, best of {quick[1]}")
    parser.set_defaults(quick_games=quick)
    return parser


def parse(parser: argparse.ArgumentParser) -> argparse.Namespace:
    args = parser.parse_args()
    if args.quick:
        args.games, args.repeat = args.quick_games
    return args

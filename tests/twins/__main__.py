"""Command line of the twin harness: up, down, demo (see harness.py)."""

import sys

from tests.twins import harness


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "help"
    try:
        if command == "up":
            twins = harness.up()
            path = harness.write_inventory(twins, harness.TWINS_INVENTORY)
            for twin in twins:
                print(f"twins: {twin.name} up, ssh spark@127.0.0.1 -p {twin.port}")
            print(f"twins: inventory written to {path.relative_to(harness.ROOT)}")
        elif command == "down":
            removed = harness.down()
            print(
                f"twins: removed {', '.join(removed) or 'nothing'} "
                f"(namespace {harness.namespace()})"
            )
            legacy = harness.legacy_twins()
            if legacy:
                print(
                    f"twins: left alone {', '.join(legacy)}: made by a harness without "
                    f"namespaces, perhaps for another checkout (`docker rm -f` them if not)"
                )
        elif command == "demo":
            from tests.twins.demo import demo

            return demo()
        elif command == "bench":
            from tests.twins.bench import bench

            return bench()
        else:
            print(__doc__ + "\nusage: python -m tests.twins up|down|demo|bench", file=sys.stderr)
            return 2
    except harness.HarnessError as error:
        print(f"twins: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

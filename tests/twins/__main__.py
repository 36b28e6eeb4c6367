"""Command line of the twin harness: up, down, demo, bench, images (see harness.py).

python -m tests.twins up              # the demo pair, cabled
python -m tests.twins up --switch N   # N twins (spark-a, spark-b, ...) on a QSFP switch
python -m tests.twins images          # the twin images, built when missing (make test builds
                                      # them beside the lint and the unit tests)
"""

import sys

from tests.twins import harness

USAGE = "usage: python -m tests.twins up [--switch N]|down|demo|bench|images"


def up_arguments(argv: list[str]) -> tuple[tuple[str, ...], harness.Fabric | None]:
    """The twins `up` starts and their wiring: the demo pair, or `--switch N` twins."""
    if not argv:
        return tuple(harness.DEMO_HOSTS), None
    if len(argv) == 2 and argv[0] == "--switch" and argv[1].isdigit():
        return harness.spark_names(int(argv[1])), "switch"
    raise harness.HarnessError(f"up {' '.join(argv)}: {USAGE}")


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "help"
    try:
        if command == "up":
            names, fabric = up_arguments(argv[1:])
            twins = harness.up(names, fabric=fabric)
            path = harness.write_inventory(twins, harness.TWINS_INVENTORY)
            for twin in twins:
                print(f"twins: {twin.name} up, ssh spark@127.0.0.1 -p {twin.port}")
            if twins and twins[0].switch is not None:
                print(f"twins: on the QSFP switch {twins[0].switch.container}")
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
        elif command == "images":
            from tests.twins.prepared import prepared_image

            print(f"twins: images {harness.build_image()} and {prepared_image()}")
        elif command == "bench":
            from tests.twins.bench import bench

            return bench()
        else:
            print(__doc__ + "\n" + USAGE, file=sys.stderr)
            return 2
    except harness.HarnessError as error:
        print(f"twins: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

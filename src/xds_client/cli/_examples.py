"""The examples at the end of each ``xds-client COMMAND --help`` (by ``prog``)."""

from __future__ import annotations

__all__ = ["EXAMPLES"]


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


EXAMPLES: dict[str, str] = {
    "xds-client": _examples(
        "xds-client serve --resources docs/examples/resources.yaml --port 18000",
        "xds-client watch -s 127.0.0.1:18000 cds",
        "xds-client COMMAND --help",
    ),
    "xds-client serve": _examples(
        "xds-client serve --resources resources.yaml --port 18000",
        "xds-client serve -r resources.yaml --port 18000 --rest-port 18001 --store-port 40311",
        "xds-client serve -r resources.yaml --validate --json",
    ),
    "xds-client watch": _examples(
        "xds-client watch -s 127.0.0.1:18000 cds                  # every cluster",
        "xds-client watch -s 127.0.0.1:18000 --delta eds backend  # one name, delta",
        "xds-client watch -s 127.0.0.1:18000 cds,eds --count 2 -o json",
        "XDS_CLIENT_SERVER=127.0.0.1:18000 xds-client watch lds",
    ),
    "xds-client fetch": _examples(
        "xds-client fetch -s 127.0.0.1:18000 cds backend -o yaml",
        "xds-client fetch -s http://127.0.0.1:18001 --json cds   # REST-JSON",
    ),
    "xds-client dump": _examples(
        "xds-client dump -s 127.0.0.1:18000",
        "xds-client dump -s 127.0.0.1:18000 --json cds eds > dump.json",
    ),
    "xds-client load": _examples(
        "xds-client load -s 127.0.0.1:18000 -n 1000 -r 100 -d 60",
        "xds-client load --sample 50 -n 200 --push-interval 5 --storm-at 30 --plot run.svg",
        "xds-client load -s 127.0.0.1:18000 --profile grpc --listener ingress --delta -o json",
    ),
    "xds-client graph": _examples(
        "xds-client graph -s 127.0.0.1:18000 ingress",
        "xds-client graph -s 127.0.0.1:18000 ingress -o name",
    ),
    "xds-client store": _examples(
        "xds-client store list -s 127.0.0.1:40311 dashboard.grafana.app/dashboards",
        "xds-client store ACTION --help",
    ),
    "xds-client store get": _examples(
        "xds-client store get -s 127.0.0.1:40311 dashboard.grafana.app/dashboards cpu",
        "xds-client store get -s 127.0.0.1:40311 dashboard.grafana.app/dashboards cpu -o json",
    ),
    "xds-client store list": _examples(
        "xds-client store list -s 127.0.0.1:40311 dashboard.grafana.app/dashboards -n default",
        "xds-client store list -s 127.0.0.1:40311 dashboard.grafana.app/dashboards "
        "-l 'team in (infra,web)'",
    ),
    "xds-client store watch": _examples(
        "xds-client store watch -s 127.0.0.1:40311 dashboard.grafana.app/dashboards --initial",
    ),
    "xds-client store create": _examples(
        "xds-client store create -s 127.0.0.1:40311 dashboard.grafana.app/dashboards cpu "
        """-d '{"spec": {"title": "CPU"}}'""",
    ),
    "xds-client store update": _examples(
        "xds-client store update -s 127.0.0.1:40311 dashboard.grafana.app/dashboards cpu "
        "-f cpu.json --resource-version 1",
    ),
    "xds-client store delete": _examples(
        "xds-client store delete -s 127.0.0.1:40311 dashboard.grafana.app/dashboards cpu",
    ),
    "xds-client store health": _examples("xds-client store health -s 127.0.0.1:40311"),
    "xds-client demo": _examples("xds-client demo", "xds-client demo --fast"),
    "xds-client completion": _examples(
        "source <(xds-client completion bash)            # in ~/.bashrc",
        "xds-client completion zsh > ~/.zfunc/_xds-client  # zsh",
    ),
}

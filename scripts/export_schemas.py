"""Write the JSON Schemas of the create request and the generation record to docs/schemas/.

`tests/unit/test_schemas.py` fails when the committed files drift from the models; re-run
`make schemas` after changing `foundation/core/contract.py`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from foundation.core.contract import CreateRequest, GenerationRecord  # noqa: E402

SCHEMAS: dict[str, type[CreateRequest] | type[GenerationRecord]] = {
    "create-request.schema.json": CreateRequest,
    "generation-record.schema.json": GenerationRecord,
}


def render(model: type[CreateRequest] | type[GenerationRecord]) -> str:
    return json.dumps(model.model_json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> None:
    out = ROOT / "docs" / "schemas"
    out.mkdir(parents=True, exist_ok=True)
    for name, model in SCHEMAS.items():
        (out / name).write_text(render(model), encoding="utf-8")
        print(f"wrote docs/schemas/{name}")


if __name__ == "__main__":
    main()

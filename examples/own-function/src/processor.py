"""The metering team's business logic: bill each meter reading once.

``Billing.process`` receives a :class:`sluice.consumer.SluiceRecord` whose ``data`` is already a
:class:`MeterReading`: a body that is not one never reaches this code (sluice isolates it to the poison
queue with the reason). The charge is a side effect, so it runs in ``record.once``: a retry, a
redelivery or the same reading sent twice never bills twice.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, Field

from sluice.consumer import SluiceRecord
from sluice.errors import PermanentError, TransientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

Kwh = Annotated[Decimal, Field(ge=0, max_digits=12, decimal_places=3)]


class MeterReading(BaseModel):
    """One meter's consumption for a period, as its interval values (kWh each). A day of one-minute
    intervals is large: producers send such a reading with a claim check (sluice.claimcheck.send)."""

    reading_id: str = Field(min_length=1, max_length=64)
    meter_id: str = Field(min_length=1, max_length=64)
    read_at: datetime
    intervals: list[Kwh] = Field(min_length=1, max_length=100_000)

    @property
    def kwh(self) -> Decimal:
        return sum(self.intervals, Decimal(0))


@dataclass(frozen=True)
class Meter:
    tariff_cents_per_kwh: Decimal
    retired: bool


class Meters:
    """The team's table: a meter's registration (sort key ``meter``: its tariff and status) and one item
    per charge billed (sort key ``charge#<reading id>#<charge id>``: a charge billed twice shows as two)."""

    def __init__(self, table: str, dynamodb: DynamoDBClient) -> None:
        self._table = table
        self._db = dynamodb

    def meter(self, meter_id: str) -> Meter | None:
        key = {"meter_id": {"S": meter_id}, "sk": {"S": "meter"}}
        item = self._db.get_item(TableName=self._table, Key=key, ConsistentRead=True).get("Item")
        if item is None:
            return None
        return Meter(Decimal(item["tariff_cents_per_kwh"]["N"]), item.get("status", {}).get("S") == "retired")

    def charge(self, meter_id: str, reading_id: str, amount_cents: int) -> str:
        charge_id = str(uuid.uuid4())
        item = {
            "meter_id": {"S": meter_id},
            "sk": {"S": f"charge#{reading_id}#{charge_id}"},
            "amount_cents": {"N": str(amount_cents)},
        }
        self._db.put_item(TableName=self._table, Item=item)
        return charge_id


class Billing:
    def __init__(self, meters: Meters) -> None:
        self._meters = meters

    def process(self, record: SluiceRecord) -> None:
        reading: MeterReading = record.data
        meter = self._meters.meter(reading.meter_id)
        if meter is None:  # its registration may still be on its way: back off, retry, dead-letter at last
            raise TransientError(f"meter {reading.meter_id} is not registered (yet)")
        if meter.retired:  # no retry can help: to the poison queue, with this reason
            raise PermanentError(f"meter {reading.meter_id} is retired")
        cents = int((reading.kwh * meter.tariff_cents_per_kwh).quantize(Decimal(1), ROUND_HALF_UP))
        record.once("charge", self._meters.charge, reading.meter_id, reading.reading_id, cents)

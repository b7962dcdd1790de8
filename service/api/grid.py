"""The grid carbon intensities the service knows, by region: what `site.region` and an offer's region name."""

from __future__ import annotations

from service.api.base import Blueprint
from service.data.catalog.grid import grid_intensities
from service.schemas.energy import GridIntensityListSchema
from service.web.auth import READERS, requires

blp = Blueprint(
    "grid-intensities", __name__, url_prefix="/v1/grid-intensities", description="Grid carbon intensities"
)


@blp.get("", operation_id="listGridIntensities")
@requires(*READERS)
@blp.response(200, GridIntensityListSchema)
def list_grid_intensities():
    """Every region with a location-based carbon intensity (gCO2e/kWh), its source and year, and where its
    provider publishes one, its fleet's PUE: the keys `site.region` takes, and that an offer's
    `provider:region` (or `grid_region`) is looked up by. A region not listed has no figure: give the
    intensity itself."""
    return {"items": sorted(grid_intensities().values(), key=lambda entry: entry.region)}

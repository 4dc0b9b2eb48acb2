"""The contract's loaders: JSON Schemas, OpenAPI documents, requirement catalogue.

The contract itself is data, in the checkout's ``schemas/`` folder (``SCHEMA_DIR``;
shipped inside this package by a wheel). Both the simulator and the conformance suite
read the contract through this package, and from nowhere else.
"""

from knowledge_schemas._files import SCHEMA_DIR, load_yaml, schema_names
from knowledge_schemas.catalogue import Catalogue, Requirement, load_catalogue
from knowledge_schemas.registry import SchemaRegistry, load_registry
from knowledge_schemas.wire import load_wire_defaults

__all__ = [
    "SCHEMA_DIR",
    "Catalogue",
    "Requirement",
    "SchemaRegistry",
    "load_catalogue",
    "load_registry",
    "load_wire_defaults",
    "load_yaml",
    "schema_names",
]

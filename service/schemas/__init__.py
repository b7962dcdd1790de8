"""marshmallow schemas, named by role, a module per resource; the same schemas validate requests and generate
`openapi.yaml`. `fields` and `common` hold what the resources share."""

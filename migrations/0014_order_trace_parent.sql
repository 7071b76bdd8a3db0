-- The W3C `traceparent` of the API request that created an order (NULL when it was not traced):
-- each step attempt's span links to that request's trace. Written once, at creation.
ALTER TABLE orders ADD COLUMN trace_parent text;

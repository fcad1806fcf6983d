//! Validating admission for the five kinds: the rules one object's CEL cannot express (a name already taken, one
//! channel per branch, hostname and domain uniqueness, plan caps), using the parsers of `slipway_crds::names`.

pub mod rules;

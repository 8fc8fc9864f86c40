"""`kimi-operator admission`: the validating webhook that puts every rule of the pydantic model at
`kubectl apply` (the CRD's CEL rules carry most of them, not engineArgs' values nor the fast path's
warnings). kopf's webhook server and admission engine, without kopf's operator (docs/install.md,
"The admission webhook")."""

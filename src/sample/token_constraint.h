// TokenConstraint: a per-sequence restriction of which tokens may come next (constrained decoding:
// structured output, enforced tool calls). The engine masks a constrained row's logits before the
// sampler and advances the constraint with the chosen token. Implementations live in src/constrain.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace dsv4 {

class TokenConstraint {
public:
    virtual ~TokenConstraint() = default;
    // An independent copy in the same state (the n choices of a request each get one).
    virtual std::unique_ptr<TokenConstraint> clone() const = 0;
    // Sets logits[t] = -inf for every token t that may not come next. `eos` is allowed exactly when
    // the output so far is complete (the grammar accepts it).
    virtual void mask(std::span<float> logits, int32_t eos) = 0;
    // Advances past `token`; false when the token was not allowed (the state is then unchanged).
    virtual bool advance(int32_t token) = 0;
    // The output so far is complete (EOS allowed).
    virtual bool complete() const = 0;
    // Complete, and nothing but EOS may follow (the sequence can end without sampling it).
    virtual bool finished() const = 0;
};

}  // namespace dsv4

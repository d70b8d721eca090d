// allreduce.c from C++17: the communicator lives in a small RAII class, so every exit path
// (return or exception) destroys it, and failures surface as exceptions that carry
// ring_comm_last_error().
//
//   ringrun -n 4 ./allreduce_cpp
//   c++ -std=c++17 allreduce.cpp $(pkg-config --cflags --libs ringcomm) -o allreduce_cpp
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <ringcomm.h>

namespace {

// Functions, not constants: clang warns (-Wunused-const-variable) about a specialization's
// constant that this file does not use.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr ring_dtype_t value() { return RING_FLOAT32; } };
template <> struct dtype_of<double> { static constexpr ring_dtype_t value() { return RING_FLOAT64; } };
template <> struct dtype_of<std::int32_t> { static constexpr ring_dtype_t value() { return RING_INT32; } };
template <> struct dtype_of<std::int64_t> { static constexpr ring_dtype_t value() { return RING_INT64; } };

class Communicator {
public:
    // Rank, size and root from the environment (ringrun, torchrun, srun or mpirun).
    Communicator()
    {
        ring_result_t rc = ring_comm_init_env(&comm_);
        if (rc != RING_OK) {
            // Build the message before destroying: the detail lives in the communicator (or,
            // when init handed none back, in this thread's slot under NULL).
            std::runtime_error err(what("ring_comm_init_env", rc));
            ring_comm_destroy(comm_);
            throw err;
        }
    }
    ~Communicator() { ring_comm_destroy(comm_); }
    // One owner per communicator: a copy would destroy it twice.
    Communicator(const Communicator &) = delete;
    Communicator &operator=(const Communicator &) = delete;

    int rank() const { return ring_comm_rank(comm_); }
    int nranks() const { return ring_comm_nranks(comm_); }

    template <typename T> void allreduce_inplace(std::vector<T> &v, ring_op_t op)
    {
        ring_result_t rc = ring_allreduce(comm_, v.data(), v.data(), v.size(), dtype_of<T>::value(), op);
        if (rc != RING_OK) throw std::runtime_error(what("ring_allreduce", rc));
    }

private:
    // The library's detail usually names the call already; the name is the fallback.
    std::string what(const char *call, ring_result_t rc) const
    {
        const std::string detail = ring_comm_last_error(comm_);
        return std::string(ring_strerror(rc)) + ": " + (detail.empty() ? call : detail);
    }

    ring_comm_t *comm_ = nullptr;
};

} // namespace

int main()
{
    try {
        Communicator comm;
        const int rank = comm.rank(), nranks = comm.nranks();
        std::vector<std::int64_t> v(4096);
        for (std::size_t i = 0; i < v.size(); i++) v[i] = rank + 1 + static_cast<std::int64_t>(i);
        comm.allreduce_inplace(v, RING_SUM);

        std::size_t bad = 0;
        for (std::size_t i = 0; i < v.size(); i++) {
            const std::int64_t want = std::int64_t{nranks} * (nranks + 1) / 2 + std::int64_t{nranks} * static_cast<std::int64_t>(i);
            if (v[i] != want && bad++ < 5)
                std::fprintf(stderr, "allreduce_cpp: rank %d: element %zu is %lld, expected %lld\n", rank, i,
                             static_cast<long long>(v[i]), static_cast<long long>(want));
        }
        if (bad) throw std::runtime_error("allreduce_cpp: " + std::to_string(bad) + " wrong elements");
        std::printf("allreduce_cpp: rank %d of %d: %zu int64 summed correctly\n", rank, nranks, v.size());
    } catch (const std::exception &e) {
        std::fprintf(stderr, "allreduce_cpp: %s\n", e.what());
        return 1;
    }
    return 0;
}

// A plain MPI program for the local MPIJob tests: every rank reports itself, then rank 0 checks an allreduce.
//   mpicxx -O1 -o hello hello.cpp && mpirun -n 2 ./hello
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char host[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    MPI_Get_processor_name(host, &len);
    std::printf("hello from rank %d of %d on %s\n", rank, size, host);
    std::fflush(stdout);

    int value = rank + 1;
    int sum = 0;
    MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int expected = size * (size + 1) / 2;
    if (rank == 0) {
        std::printf("allreduce sum %d (expected %d)\n", sum, expected);
        std::fflush(stdout);
    }
    MPI_Finalize();
    return sum == expected ? EXIT_SUCCESS : EXIT_FAILURE;
}
